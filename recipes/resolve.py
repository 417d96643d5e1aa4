"""RunConfig + hardware -> one ResolvedRun: every default and `auto` decided once, in a commented order.

`recipe run` builds it in the launching process and hands it to the ranks as a file; `plan`, `compare`,
`launch --print` and `export-config` build it the same way and print or write from it. No weights are built
or loaded here: the model is read from its config on the meta device.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Optional

from shardlab.core import memory, precision as precisions, registry, selector, trace
from shardlab.core.config import RunConfig, same_value
from shardlab.core.errors import UserError
from shardlab.core.hardware import Hardware, probe
from shardlab.core.resolved import ResolvedRun
from shardlab.recipes.model import SHAPES, llama_fields

CPU_DEVICES = 2  # CPU processes when --devices is auto
CPU_MICRO_BATCH = 4
MAX_SEQ_LEN = 2048  # the default sequence length is the model's context, up to this
MICRO_BATCHES = (1, 2, 4, 8, 16, 32, 64)  # what `--micro-batch-size auto` tries


def hardware(cfg: RunConfig, for_run: bool, need_memory: bool = True) -> Hardware:
    """The hardware the run is decided for. for_run: it must be this machine (GPUs counted and checked).
    need_memory=False (export-config, launch --print): GPUs that are not here may come without --gpu-memory-gib;
    their memory is then 0, and only a choice that needs it (strategy or micro-batch auto) is refused."""
    gpus = cfg.gpus
    if for_run and cfg.accelerator != "cpu":
        import torch

        visible = torch.cuda.device_count()
        if cfg.accelerator == "gpu" and visible == 0:
            raise UserError("--accelerator gpu: no CUDA GPU is visible here; use --accelerator cpu")
        if isinstance(cfg.devices, int) and visible and cfg.devices > visible:
            raise UserError(f"--devices {cfg.devices}: only {visible} GPU(s) visible; use --devices {visible} or fewer")
        if gpus is None and visible and isinstance(cfg.devices, int):
            gpus = cfg.devices
    elif gpus is None and isinstance(cfg.devices, int) and cfg.accelerator == "gpu":
        gpus = cfg.devices  # planning a GPU run elsewhere: --devices is its GPUs per node
    if cfg.accelerator == "gpu" and gpus == 0:
        raise UserError("--gpus 0: a GPU run needs at least one GPU; use --accelerator cpu to plan a CPU run")
    unknown_memory = not need_memory and cfg.accelerator == "gpu" and cfg.gpu_memory_gib is None and not _visible_gpus()
    hw = probe(cfg.accelerator, cfg.num_nodes, gpus, 0.0 if unknown_memory else cfg.gpu_memory_gib, cfg.cpu_memory_gib)
    if "gpus" in hw.given and cfg.gpus is None:  # counted from --devices, not given with --gpus
        hw = hw.model_copy(update={"given": tuple(g for g in hw.given if g != "gpus")})
    return hw


def _visible_gpus() -> int:
    import torch

    return torch.cuda.device_count()


def _from_deepspeed_file(cfg: RunConfig) -> tuple[RunConfig, list[str], list[str], Optional[dict]]:
    """A user's DeepSpeed file states intent: its values become the run's wherever no flag was typed.
    Returns the run, what the file decided, notes, and (under --strategy auto) the file's choice with its reason."""
    if not cfg.deepspeed_config:
        return cfg, [], [], None
    given = cfg.model_fields_set - {"deepspeed_config"}
    _, fields, notes = registry.native_config_reader("deepspeed").read_native_config(cfg.deepspeed_config)
    name = cfg.deepspeed_config
    if "strategy" in given and cfg.strategy != "auto":
        preset = registry.with_offload(registry.get(cfg.strategy), cfg.offload).name
        if preset != fields["strategy"]:
            raise UserError(f"--strategy {preset}: {name} describes {fields['strategy']} (zero_optimization stage and "
                            f"offload); drop --strategy to follow the file, or change the file")
    problems = [f"{k} is {v!r} in {name} but --{k.replace('_', '-')} gives {getattr(cfg, k)!r}"
                for k, v in fields.items() if k in given and k != "strategy" and not same_value(getattr(cfg, k), v)]
    if problems:
        raise UserError("; ".join(problems) + "; drop the flag to follow the file, or change the file")
    taken = {k: v for k, v in fields.items() if k not in given or (k == "strategy" and cfg.strategy == "auto")}
    taken.pop("offload", None)
    decisions = [f"{name} decided {', '.join(f'{k}={v}' for k, v in taken.items() if k != 'strategy')} "
                 f"(no flag given for them)"] if set(taken) - {"strategy"} else []
    auto = {"choice": taken["strategy"], "reasons": [f"{name} describes {taken['strategy']} (its zero_optimization stage "
                                                     f"and offload): the file decided"]} if "strategy" in taken else None
    return cfg.model_copy(update={**taken, "offload": None} if "strategy" in taken else taken), decisions, notes, auto


def _default_seq_len(name: str, context: int) -> int:
    return SHAPES.get(name, {}).get("default_seq_len") or min(context, MAX_SEQ_LEN)


class NothingFits(UserError):
    """`--strategy auto` found nothing that fits: `recipe run` prints the one line (exit 2), `recipe plan` the table
    (every candidate, none fitting), the closest option and the fixes."""

    def __init__(self, decision: selector.Decision, budget: selector.Budget, model: dict, work: memory.Workload):
        super().__init__(decision.message)
        self.decision, self.budget, self.model, self.work = decision, budget, model, work
        self.rows = [_row(r) for r in decision.rows]


def resolve_run(cfg: RunConfig, for_run: bool = True, need_memory: bool = True) -> ResolvedRun:
    """for_run=False: for a machine that is not this one (plan, export-config, launch --print): GPUs need not be here.
    need_memory=False: nor need their memory be given, unless a choice depends on it."""
    trace.note("resolve")
    # 1. The user's DeepSpeed file, then the model (its config only: nothing is built).
    cfg, decisions, warnings, file_choice = _from_deepspeed_file(cfg)
    model_cfg = llama_fields(cfg.model)
    shape, context = memory.shape_of(model_cfg), model_cfg["max_position_embeddings"]
    # 2. The hardware, accelerator, processes per node and precision; what "fits" means there.
    hw = hardware(cfg, for_run, need_memory)
    devices = cfg.devices if isinstance(cfg.devices, int) else (hw.gpus_per_node if hw.accelerator == "gpu" else CPU_DEVICES)
    precision = precisions.resolve(cfg.precision, hw.accelerator, hw.bf16)
    budget = selector.Budget(hw if hw.accelerator == "gpu" else hw.model_copy(update={"gpus_per_node": 0}),
                             cfg.memory_headroom, devices)
    # 3. Kernels and the sequence length.
    kernels, seq_len = _kernels_and_seq_len(cfg, hw.accelerator, context, decisions)
    # 4. The workload the estimate sees: micro-batch 1 while `auto` is undecided, checkpointing as given (else off).
    micro, work = _workload(cfg, budget.hw, devices, precision, kernels, seq_len)
    # 5. The preset, and activation checkpointing: the selector's choice for `auto`, else the named preset.
    preset, decision, work = _preset(cfg, budget, shape, work, decisions)
    strategy = preset.build()
    if hw.accelerator == "cpu" and not strategy.capabilities.cpu:
        raise UserError(f"--strategy {preset.name}: has no CPU support; use --accelerator gpu or another strategy")
    compile_ = _compiled(preset, work, hw.accelerator)
    work = dataclasses.replace(work, compiled=compile_)  # torch.compile keeps fewer activations (core/memory.py)
    fused = _fused_adds(cfg, preset, compile_, hw.accelerator, model_cfg, kernels)
    expandable = _expandable_segments(cfg, hw.accelerator, decisions)
    # --experiments as given, else the chosen preset's defaults for this precision (zero3's change its step's memory)
    levers = cfg.experiments if cfg.experiments is not None else list(strategy.default_experiments(precision))
    work = dataclasses.replace(work, experiments=tuple(levers))
    # 6. The batch: micro-batch (auto: the largest the estimate fits), then accumulation (for offload under auto,
    #    the selector's step 4, from the final micro-batch).
    micro, largest, grad_accum, batch_reasons = _batch(cfg, strategy, preset, budget, shape, work, micro, decisions)
    work = dataclasses.replace(work, micro_batch_size=micro, grad_accum=grad_accum)
    # The CPU share of an offloaded optimizer (the selector's step 5): taken where `auto` chose offload, else a hint.
    ratio = None
    if cfg.offload_ratio is None and strategy.capabilities.offload_ratio:
        ratio, reasons, hints = selector.offload_ratio(
            budget, lambda r: strategy.estimate(shape, dataclasses.replace(work, offload_ratio=r)),
            chosen=decision is not None and not cfg.offload)
        batch_reasons += reasons
        decisions += hints
        work = dataclasses.replace(work, offload_ratio=ratio or work.offload_ratio)
    # 7. The adapter's own checks, the user's DeepSpeed file, the estimate and the table, for the run that trains.
    estimate = strategy.estimate(shape, work)
    auto = file_choice  # under `auto`, the DeepSpeed file's preset with its reason, or the selector's:
    if decision is not None:  # its estimate line quotes the workload that trains (the micro-batch auto took)
        auto = {"choice": preset.name, "reasons": decision.reasons + (
            [selector.estimate_reason(preset.name, estimate, budget)] if estimate is not None else []) + batch_reasons}
    resolved = cfg.model_copy(update=dict(
        strategy=preset.name, offload=None, accelerator=hw.accelerator, devices=devices, precision=precision,
        kernels=kernels, compile=compile_, fused_adds=fused, expandable_segments=expandable, seq_len=seq_len,
        micro_batch_size=micro, grad_accum=grad_accum, offload_ratio=ratio or cfg.offload_ratio,
        activation_checkpointing=work.activation_checkpointing, output=cfg.output or f"runs/{preset.name}"))
    run = ResolvedRun(config=resolved, hardware=budget.hw, model={"name": cfg.model, **shape.describe()},
                      context_length=context, decisions=decisions, auto=auto, warnings=warnings)
    run = _experiments(run, strategy, cfg, levers)
    run = _check(run, strategy, cfg, shape, kernels)
    # Every candidate estimated again, at the final micro-batch and checkpointing: the choice above was made at
    # micro-batch 1 when `auto` (what fits at all decides the preset; the micro-batch then follows from it),
    # while the table shows the run that trains.
    rows = [_row(r) for r in selector.table(
        _candidates(budget.hw, shape, work, precision, preset.name, cfg.experiments), budget)]
    return run.model_copy(update={
        "candidates": rows, "largest_micro_batch": largest,
        "estimate": None if estimate is None else {"gpu_bytes": estimate.gpu_bytes, "cpu_bytes": estimate.cpu_bytes,
                                                   "parts": estimate.parts}})


def _kernels_and_seq_len(cfg: RunConfig, accelerator: str, context: int, decisions: list[str]) -> tuple[str, int]:
    """Liger's fused kernels where installed on GPUs (as fast as compile at less memory, benchmarks/results/2026-12-05d-h200.md);
    the sequence length: the model's context up to MAX_SEQ_LEN, or the test shape's default."""
    from shardlab.recipes import kernels as kernel_lib

    kernels = cfg.kernels or ("torch" if cfg.compile else kernel_lib.default(accelerator))
    seq_len = cfg.seq_len or _default_seq_len(cfg.model, context)
    if cfg.seq_len is None:
        why = ("the default of this test shape" if seq_len != min(context, MAX_SEQ_LEN)
               else f"the model's context ({context}) up to {MAX_SEQ_LEN}")
        decisions.append(f"sequence length {seq_len}: {why}; --seq-len sets it")
    if seq_len > context:
        raise UserError(f"--seq-len {seq_len}: the model takes at most {context} tokens")
    return kernels, seq_len


def _workload(cfg: RunConfig, hw: Hardware, devices: int, precision: str, kernels: str,
              seq_len: int) -> tuple[Any, memory.Workload]:
    """The micro-batch as given (or `auto`, estimated at 1 until the preset is known) and the workload."""
    micro = cfg.micro_batch_size if cfg.micro_batch_size is not None else ("auto" if hw.accelerator == "gpu" else CPU_MICRO_BATCH)
    if hw.accelerator == "gpu" and hw.gpu_memory_bytes == 0 and (cfg.strategy == "auto" or micro == "auto"):
        what = "--strategy auto" if cfg.strategy == "auto" else "--micro-batch-size auto (the GPU default)"
        raise UserError(f"{what} needs the GPU memory, and no GPU is here to measure; give --gpu-memory-gib, "
                        f"or name the {'strategy' if cfg.strategy == 'auto' else 'micro-batch (--micro-batch-size N)'}")
    return micro, memory.Workload(micro_batch_size=1 if micro == "auto" else micro, seq_len=seq_len,
                                  activation_checkpointing=bool(cfg.activation_checkpointing), precision=precision,
                                  gpus_per_node=devices, num_nodes=cfg.num_nodes,
                                  chunked_loss=cfg.chunked_loss or kernels == "liger",  # Liger's loss never builds logits
                                  kernels=kernels, compiled=cfg.compile,  # None: each preset's default (_compiled)
                                  float8=cfg.float8,
                                  offload_ratio=1.0 if cfg.offload_ratio is None else cfg.offload_ratio,
                                  grad_accum=_given_accum(cfg, 1 if micro == "auto" else micro,
                                                          devices * cfg.num_nodes) or 1)


def _preset(cfg: RunConfig, budget: selector.Budget, shape: memory.Shape, work: memory.Workload,
            decisions: list[str]) -> tuple[registry.Preset, Optional[selector.Decision], memory.Workload]:
    """The preset, and the workload with activation checkpointing decided. Returns (preset, the selector's decision
    under `auto`, else None; workload). Nothing fits under `auto`: NothingFits."""
    decision = None
    if cfg.strategy == "auto":
        given = cfg.experiments  # the levers asked for: their memory counts for each preset that offers them
        candidates = _candidates(budget.hw, shape, work, work.precision, given=given)
        # checkpointing not given: the selector weighs it against offload (each candidate estimated with it too)
        checkpointed = None if cfg.activation_checkpointing is not None else _candidates(
            budget.hw, shape, dataclasses.replace(work, activation_checkpointing=True), work.precision, given=given)
        decision = selector.choose(budget, shape, work, cfg.offload, candidates, checkpointed)
        if decision.choice is None:
            raise NothingFits(decision, budget, {"name": cfg.model, **shape.describe()},
                              dataclasses.replace(work, activation_checkpointing=decision.activation_checkpointing))
        work = dataclasses.replace(work, activation_checkpointing=decision.activation_checkpointing)
    preset = registry.with_offload(registry.get(decision.choice if decision else cfg.strategy),
                                   None if decision else cfg.offload)
    missing = [n for n in cfg.experiments or [] if n not in preset.capabilities.experiments]
    if decision and missing:  # levers are a preset's: say why auto chose one without them, before its own check does
        raise UserError(f"--experiments {','.join(cfg.experiments)}: --strategy auto chose {preset.name} "
                        f"({decision.reasons[-1]}), which offers no {','.join(missing)}; name the preset these levers "
                        f"are for with --strategy (`recipe strategies` lists them), or drop --experiments")
    if cfg.activation_checkpointing is None and not work.activation_checkpointing:
        why = "what was chosen fits without it" if decision else "the default"
        decisions.append(f"activation checkpointing off: {why}; --activation-checkpointing turns it on")
    return preset, decision, work


def _batch(cfg: RunConfig, strategy, preset: registry.Preset, budget: selector.Budget, shape: memory.Shape,
           work: memory.Workload, micro: Any, decisions: list[str]) -> tuple[int, Optional[int], int, list[str]]:
    """The micro-batch (auto: the largest the estimate fits), the largest that fits (GPU runs), the accumulation, and
    the selector's reasons for the offload batch. Returns (micro, largest, grad_accum, reasons)."""
    world = work.world_size
    divides = (lambda mb: cfg.global_batch_size % (mb * world) == 0) if cfg.global_batch_size and micro == "auto" else None
    accum = (lambda mb: _given_accum(cfg, mb, world)) if divides else None  # each micro-batch's accumulation
    largest = _largest_micro_batch(strategy, shape, work, budget, divides, accum) if micro == "auto" or (
        budget.hw.accelerator == "gpu" and selector.fits(strategy.estimate(shape, work), budget)) else None
    if micro == "auto":
        micro = largest
        decisions.append(f"micro-batch {micro}: the largest of {', '.join(map(str, MICRO_BATCHES))} that the memory "
                         f"estimate fits with {preset.name}" + (f" and that divides --global-batch-size {cfg.global_batch_size} "
                                                                 f"over {world} rank(s)" if divides else "")
                         + " (--micro-batch-size N sets it; --global-batch-size keeps the global batch whatever the hardware)")
    picked, reasons = None, []
    if cfg.strategy == "auto":  # the selector's step 4, the offload batch, from the final micro-batch
        given = _given_accum(cfg, micro, world)
        picked, reasons = selector.offload_batch(budget.hw, dataclasses.replace(work, micro_batch_size=micro),
                                                 preset.capabilities.offload != "none", given)
    return micro, largest, _accumulation(cfg, micro, world, picked), reasons


def _experiments(run: ResolvedRun, strategy, cfg: RunConfig, names: list[str]) -> ResolvedRun:
    """--experiments as given, else the levers the chosen preset turns on for this run (said in the decisions)."""
    if cfg.experiments is not None:
        return run
    if names:
        run.decisions.append(f"experiments {','.join(names)}: {strategy.name}'s defaults (`recipe strategies` says what "
                             f"each does); --experiments none runs without them")
    return run.model_copy(update={"config": run.config.model_copy(update={"experiments": names})})


def _check(run: ResolvedRun, strategy, cfg: RunConfig, shape: memory.Shape, kernels: str) -> ResolvedRun:
    """The user's DeepSpeed file filled from the run, then the adapter's and the kernels' own checks."""
    if cfg.deepspeed_config:
        file, _, _ = registry.native_config_reader("deepspeed").read_native_config(cfg.deepspeed_config)
        filled, more = strategy.use_native_config(file, cfg.deepspeed_config, run.context(), run.optimizer(), shape.hidden)
        run = run.model_copy(update={"deepspeed_config": filled, "warnings": run.warnings + more})
    strategy.check(run.context())
    run = run.model_copy(update={"warnings": run.warnings + strategy.warnings(run.context())})
    if cfg.float8:
        from shardlab.recipes import float8
        float8.check(run.config.precision)
    if kernels == "liger":
        from shardlab.recipes import kernels as kernel_lib

        kernel_lib.check(run.config.accelerator)
    return run


def _row(r: selector.Row) -> dict[str, Any]:
    e = r.estimate
    return {"name": r.name, "gpu_bytes": e.gpu_bytes if e else None, "cpu_bytes": e.cpu_bytes if e else None,
            "fits": r.fits, "source": r.source, "parts": e.parts if e else None}


def _candidates(hw: Hardware, shape: memory.Shape, work: memory.Workload, precision: str,
                chosen: Optional[str] = None, given: Optional[list[str]] = None,
                ) -> dict[str, tuple[registry.Preset, Optional[memory.Estimate]]]:
    """Every preset that can run here, with its estimate for this workload. Its levers: the run's for the chosen
    preset; the user's --experiments (given) for each preset that offers them all, as it would run them; else its
    own defaults. So `auto` weighs the memory of the levers asked for (gpu-accum's 2 bytes a parameter)."""
    out = {}
    for name, preset in registry.presets().items():
        caps = preset.capabilities
        if (caps.gpu if hw.accelerator == "gpu" else caps.cpu) and precision in caps.precisions \
                and (hw.num_nodes == 1 or caps.multi_node):
            levers = work.experiments if name == chosen else \
                tuple(given) if given is not None and set(given) <= set(caps.experiments) else None
            out[name] = (preset, preset.build().estimate(shape, dataclasses.replace(
                work, compiled=_compiled(preset, work, hw.accelerator), experiments=levers)))
    return out


def _fused_adds(cfg: RunConfig, preset: registry.Preset, compiled: bool, accelerator: str, model_cfg: dict,
                kernels: str) -> bool:
    """--fused-adds as given, else on for GPU runs with Liger's kernels (where it was measured) of the presets measured
    faster with it, not under torch.compile nor for projections with biases (recipes/fused_adds.py)."""
    biased = model_cfg.get("attention_bias") or model_cfg.get("mlp_bias")
    if cfg.fused_adds and compiled:  # compile by the preset's default (given together, the config refuses them)
        raise UserError(f"--fused-adds: {preset.name} compiles its GPU runs by default, and torch.compile fuses these "
                        "adds itself; add --no-compile, or drop --fused-adds")
    if cfg.fused_adds and biased:
        raise UserError(f"--fused-adds: {cfg.model} has biases in its projections (attention_bias or mlp_bias), which "
                        "the folded adds do not take; drop --fused-adds")
    if cfg.fused_adds is not None:
        return cfg.fused_adds
    return (accelerator == "gpu" and kernels == "liger" and preset.capabilities.fused_adds_by_default and not compiled
            and not biased)


ALLOC_ENV = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")


def allocator_env() -> Optional[tuple[str, bool]]:
    """(variable, whether it turns expandable segments on) where torch's allocator is configured by the environment."""
    for name in ALLOC_ENV:
        if os.environ.get(name):
            return name, "expandable_segments:true" in os.environ[name].replace(" ", "").lower()
    return None


def _expandable_segments(cfg: RunConfig, accelerator: str, decisions: list[str]) -> bool:
    """--expandable-segments as given (GPU runs only), else what PYTORCH_CUDA_ALLOC_CONF / PYTORCH_ALLOC_CONF say
    where set, else on for GPU runs (the allocator's peak is then the tensors' own: results/2026-12-07c-peak-sites.md)."""
    if accelerator != "gpu":
        if cfg.expandable_segments:
            raise UserError("--expandable-segments: it sets PyTorch's CUDA allocator, for GPU runs only; drop it or run "
                            "with --accelerator gpu")
        return False
    if cfg.expandable_segments is not None:
        return cfg.expandable_segments
    env = allocator_env()
    if env is not None:
        decisions.append(f"expandable segments: {'on' if env[1] else 'off'}, as {env[0]} says ({os.environ[env[0]]})")
        return env[1]
    return True


def _compiled(preset: registry.Preset, work: memory.Workload, accelerator: str) -> bool:
    """--compile as given, else on for GPU runs of the presets measured faster with it, not with Liger's kernels."""
    if work.compiled is not None:
        return work.compiled
    return accelerator == "gpu" and preset.capabilities.compile_by_default and work.kernels != "liger"


def _largest_micro_batch(strategy, shape: memory.Shape, work: memory.Workload, budget: selector.Budget,
                         allowed=None, accum=None) -> int:
    """allowed: which micro-batches may be taken (--global-batch-size: those dividing it); accum: the accumulation
    each implies (else the workload's)."""
    def fits(mb: int) -> bool:
        at = dataclasses.replace(work, micro_batch_size=mb, grad_accum=accum(mb) if accum else work.grad_accum)
        return selector.fits(strategy.estimate(shape, at), budget)

    fitting = [mb for mb in MICRO_BATCHES if (allowed is None or allowed(mb)) and fits(mb)]
    if not fitting:
        fixes = [f for f, needed in (("--activation-checkpointing", not work.activation_checkpointing),
                                      ("CPU offload (--offload optimizer)", strategy.capabilities.offload == "none"),
                                      ("more GPUs (--num-nodes, --devices)", True)) if needed]
        if allowed is not None and not any(allowed(mb) for mb in MICRO_BATCHES):
            raise UserError(f"--global-batch-size: no micro-batch of {', '.join(map(str, MICRO_BATCHES))} divides it over "
                            f"the ranks; give a multiple of {work.world_size} or --micro-batch-size N")
        raise UserError(f"--micro-batch-size auto: not even micro-batch 1 fits with {strategy.name} by the memory "
                        f"estimate on {budget.hw.describe()}, {budget.describe()}; try {', '.join(fixes)}")
    return max(fitting)


def _given_accum(cfg: RunConfig, micro: int, world: int) -> Optional[int]:
    """The accumulation the user's flags give at micro-batch `micro`: --grad-accum, else what --global-batch-size
    implies (at least 1; _accumulation refuses one it does not divide); None where neither is given."""
    if cfg.grad_accum:
        return cfg.grad_accum
    return max(1, cfg.global_batch_size // (micro * world)) if cfg.global_batch_size else None


def _accumulation(cfg: RunConfig, micro: int, world: int, picked: Optional[int]) -> int:
    if cfg.global_batch_size is None:
        return cfg.grad_accum or picked or 1
    per_step = micro * world
    if cfg.global_batch_size % per_step:
        raise UserError(f"--global-batch-size {cfg.global_batch_size}: not a multiple of micro-batch {micro} x "
                        f"{world} rank(s) = {per_step}; give a multiple of {per_step} or another --micro-batch-size")
    accum = cfg.global_batch_size // per_step
    if cfg.grad_accum is not None and cfg.grad_accum != accum:
        raise UserError(f"--grad-accum {cfg.grad_accum} contradicts --global-batch-size {cfg.global_batch_size} "
                        f"(= micro-batch {micro} x {world} rank(s) x {accum}); give one of them")
    return accum
