"""RunConfig + hardware -> one ResolvedRun: every default and `auto` decided once, in a commented order.

`recipe run` builds it in the launching process and hands it to the ranks as a file; `plan`, `compare`,
`launch --print` and `export-config` build it the same way and print or write from it. No weights are built
or loaded here: the model is read from its config on the meta device.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

from shardlab.core import memory, precision as precisions, registry, selector, trace
from shardlab.core.config import RunConfig
from shardlab.core.errors import UserError
from shardlab.core.hardware import Hardware, probe
from shardlab.core.resolved import ResolvedRun
from shardlab.recipes.model import SHAPES, model_config

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
                for k, v in fields.items() if k in given and k != "strategy" and not _same(getattr(cfg, k), v)]
    if problems:
        raise UserError("; ".join(problems) + "; drop the flag to follow the file, or change the file")
    taken = {k: v for k, v in fields.items() if k not in given or (k == "strategy" and cfg.strategy == "auto")}
    taken.pop("offload", None)
    decisions = [f"{name} decided {', '.join(f'{k}={v}' for k, v in taken.items() if k != 'strategy')} "
                 f"(no flag given for them)"] if set(taken) - {"strategy"} else []
    auto = {"choice": taken["strategy"], "reasons": [f"{name} describes {taken['strategy']} (its zero_optimization stage "
                                                     f"and offload): the file decided"]} if "strategy" in taken else None
    return cfg.model_copy(update={**taken, "offload": None} if "strategy" in taken else taken), decisions, notes, auto


def _same(a: Any, b: Any) -> bool:
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return a == b


def _default_seq_len(name: str, context: int) -> int:
    return SHAPES.get(name, {}).get("default_seq_len") or min(context, MAX_SEQ_LEN)


def resolve_run(cfg: RunConfig, for_run: bool = True, need_memory: bool = True) -> ResolvedRun:
    """for_run=False: for a machine that is not this one (plan, export-config, launch --print): GPUs need not be here.
    need_memory=False: nor need their memory be given, unless a choice depends on it."""
    trace.note("resolve")
    decisions: list[str] = []
    # 1. The user's DeepSpeed file, then the model (its config only: nothing is built).
    cfg, from_file, warnings, file_choice = _from_deepspeed_file(cfg)
    decisions += from_file
    model_cfg = model_config(cfg.model)
    shape = memory.shape_of(model_cfg)
    context = model_cfg.max_position_embeddings
    # 2. The hardware, accelerator, processes per node and precision.
    hw = hardware(cfg, for_run, need_memory)
    accelerator = hw.accelerator
    devices = cfg.devices if isinstance(cfg.devices, int) else (hw.gpus_per_node if accelerator == "gpu" else CPU_DEVICES)
    precision = precisions.resolve(cfg.precision, accelerator, hw.bf16)
    # 3. Kernels (Liger's fused kernels where installed on GPUs: measured fastest,
    #    benchmarks/results/2026-12-02-liger-h200.md) and the sequence length.
    from shardlab.recipes import kernels as kernel_lib

    kernels = cfg.kernels or ("torch" if cfg.compile else kernel_lib.default(accelerator))
    seq_len = cfg.seq_len or _default_seq_len(cfg.model, context)
    if cfg.seq_len is None:
        why = ("the default of this test shape" if seq_len != min(context, MAX_SEQ_LEN)
               else f"the model's context ({context}) up to {MAX_SEQ_LEN}")
        decisions.append(f"sequence length {seq_len}: {why}; --seq-len sets it")
    if seq_len > context:
        raise UserError(f"--seq-len {seq_len}: the model takes at most {context} tokens")
    micro = cfg.micro_batch_size if cfg.micro_batch_size is not None else ("auto" if accelerator == "gpu" else CPU_MICRO_BATCH)
    if accelerator == "gpu" and hw.gpu_memory_bytes == 0 and (cfg.strategy == "auto" or micro == "auto"):
        what = "--strategy auto" if cfg.strategy == "auto" else "--micro-batch-size auto (the GPU default)"
        raise UserError(f"{what} needs the GPU memory, and no GPU is here to measure; give --gpu-memory-gib, "
                        f"or name the {'strategy' if cfg.strategy == 'auto' else 'micro-batch (--micro-batch-size N)'}")
    work = memory.Workload(micro_batch_size=1 if micro == "auto" else micro, seq_len=seq_len,
                           activation_checkpointing=cfg.activation_checkpointing, precision=precision,
                           gpus_per_node=devices, num_nodes=cfg.num_nodes,
                           chunked_loss=cfg.chunked_loss or kernels == "liger")  # Liger's loss never builds logits
    hw = hw if accelerator == "gpu" else hw.model_copy(update={"gpus_per_node": 0})
    # 4. The preset: the selector's choice for `auto` (from this same workload), else the named one.
    candidates = _candidates(hw, shape, work, accelerator, precision)
    auto, strategy_name = file_choice, cfg.strategy
    if strategy_name == "auto":
        decision = selector.choose(hw, shape, work, cfg.offload, candidates)
        auto, strategy_name = {"choice": decision.choice, "reasons": decision.reasons}, decision.choice
    preset = registry.with_offload(registry.get(strategy_name), None if cfg.strategy == "auto" else cfg.offload)
    strategy = preset.build()
    if accelerator == "cpu" and not strategy.capabilities.cpu:
        raise UserError(f"--strategy {preset.name}: has no CPU support; use --accelerator gpu or another strategy")
    compile_ = cfg.compile if cfg.compile is not None else (
        accelerator == "gpu" and preset.capabilities.compile_by_default and kernels != "liger")
    # 5. The batch: micro-batch (auto: the largest the estimate fits), then accumulation from the global batch.
    world = devices * cfg.num_nodes
    divides = (lambda mb: cfg.global_batch_size % (mb * world) == 0) if cfg.global_batch_size and micro == "auto" else None
    largest = _largest_micro_batch(strategy, shape, work, hw, divides) if micro == "auto" or (
        accelerator == "gpu" and selector.fits(strategy.estimate(shape, work), hw)) else None
    if micro == "auto":
        micro = largest
        decisions.append(f"micro-batch {micro}: the largest of {', '.join(map(str, MICRO_BATCHES))} that the memory "
                         f"estimate fits with {preset.name}" + (f" and that divides --global-batch-size {cfg.global_batch_size} "
                                                                 f"over {world} rank(s)" if divides else "")
                         + " (--micro-batch-size N sets it; --global-batch-size keeps the global batch whatever the hardware)")
        work = dataclasses.replace(work, micro_batch_size=micro)
    picked_accum = None
    if cfg.strategy == "auto":  # 4. the offload batch, from the final micro-batch
        given = cfg.grad_accum or (cfg.global_batch_size // (micro * world) if cfg.global_batch_size else None)
        picked_accum, more = selector.offload_batch(hw, work, preset.capabilities.offload != "none", given)
        auto = {**auto, "reasons": auto["reasons"] + more}
    grad_accum = _accumulation(cfg, micro, world, picked_accum)
    # 6. The adapter's own checks, the user's DeepSpeed file, the estimate.
    resolved = cfg.model_copy(update=dict(
        strategy=preset.name, offload=None, accelerator=accelerator, devices=devices, precision=precision,
        kernels=kernels, compile=compile_, seq_len=seq_len, micro_batch_size=micro, grad_accum=grad_accum,
        output=cfg.output or f"runs/{preset.name}"))
    run = ResolvedRun(config=resolved, hardware=hw, model={"name": cfg.model, **shape.describe()}, context_length=context,
                      decisions=decisions, auto=auto, warnings=warnings)
    deepspeed_filled = None
    if cfg.deepspeed_config:
        file, _, _ = registry.native_config_reader("deepspeed").read_native_config(cfg.deepspeed_config)
        deepspeed_filled, more = strategy.use_native_config(file, cfg.deepspeed_config,
                                                            run.context(), run.optimizer(), shape.hidden)
        warnings = warnings + more
        run = run.model_copy(update={"deepspeed_config": deepspeed_filled})
    ctx = run.context()
    strategy.check(ctx)
    if kernels == "liger":
        kernel_lib.check(accelerator, compile_)
    estimate = strategy.estimate(shape, work)
    if run.auto and estimate is not None:  # the estimate line for the workload that trains (the micro-batch auto took)
        reasons = [r if not r.startswith(f"{preset.name} is estimated at") else selector.estimate_reason(preset.name, estimate, hw)
                   for r in run.auto["reasons"]]
        run = run.model_copy(update={"auto": {**run.auto, "reasons": reasons}})
    rows = [{"name": n, "gpu_bytes": e.gpu_bytes if e else None, "cpu_bytes": e.cpu_bytes if e else None,
             "fits": selector.fits(e, hw), "source": p.source, "parts": e.parts if e else None}
            for n, (p, e) in _candidates(hw, shape, work, accelerator, precision).items()]  # at the final micro-batch
    return run.model_copy(update={
        "candidates": rows, "warnings": warnings, "largest_micro_batch": largest,
        "estimate": None if estimate is None else {"gpu_bytes": estimate.gpu_bytes, "cpu_bytes": estimate.cpu_bytes,
                                                   "parts": estimate.parts}})


def _candidates(hw: Hardware, shape: memory.Shape, work: memory.Workload, accelerator: str,
                precision: str) -> dict[str, tuple[registry.Preset, Optional[memory.Estimate]]]:
    """Every preset that can run here, with its estimate for this workload."""
    out = {}
    for name, preset in registry.presets().items():
        caps = preset.capabilities
        if (caps.gpu if accelerator == "gpu" else caps.cpu) and precision in caps.precisions \
                and (hw.num_nodes == 1 or caps.multi_node):
            out[name] = (preset, preset.build().estimate(shape, work))
    return out


def _largest_micro_batch(strategy, shape: memory.Shape, work: memory.Workload, hw: Hardware, allowed=None) -> int:
    fitting = [mb for mb in MICRO_BATCHES if (allowed is None or allowed(mb))
               and selector.fits(strategy.estimate(shape, dataclasses.replace(work, micro_batch_size=mb)), hw)]
    if not fitting:
        fixes = [f for f, needed in (("--activation-checkpointing", not work.activation_checkpointing),
                                      ("CPU offload (--offload optimizer)", strategy.capabilities.offload == "none"),
                                      ("more GPUs (--num-nodes, --devices)", True)) if needed]
        if allowed is not None and not any(allowed(mb) for mb in MICRO_BATCHES):
            raise UserError(f"--global-batch-size: no micro-batch of {', '.join(map(str, MICRO_BATCHES))} divides it over "
                            f"the ranks; give a multiple of {work.world_size} or --micro-batch-size N")
        raise UserError(f"--micro-batch-size auto: not even micro-batch 1 fits with {strategy.name} by the memory "
                        f"estimate on {hw.describe()}; try {', '.join(fixes)}")
    return max(fitting)


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
