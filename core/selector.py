"""Which strategy to run: the owner's decision tree, then feasibility against the memory estimate.

Every branch returns its reason, so `recipe plan` and `recipe run --strategy auto` can say why. When nothing
fits, the Decision has no choice: it names the closest option by the memory that binds (GPU, or CPU per node)
and only the fixes that reduce that memory.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Callable, Optional

from shardlab.core.hardware import Hardware, human_bytes
from shardlab.core.memory import Estimate, Shape, Workload
from shardlab.core.registry import Preset

LARGE_MODEL_PARAMS = 10e9  # the tree's split between FSDP and DeepSpeed
OFFLOAD_LEVELS = ("none", "optimizer", "all")  # Capabilities.offload, cheapest first

# CPU offload steps the optimizer on the CPU once per optimizer step (~1 s for llama-1b on 16 cores) and
# copies gradients to the CPU once per micro-batch: enough tokens per step make both small next to forward
# and backward. Measured on one H200 (llama-1b, seq 2048, results/2026-12-02-offload-and-ratios-h200.md),
# zero3_offload's time per token against zero3's (micro-batch 8, one per step): 3.7x at 16,384 tokens per
# step, 1.5x at 90,112 (mean), 1.2x at 180,224 (micro-batch 8 x 11), 1.0x at 163,840 (micro-batch 16 x 5).
# With the 2026-12-03 defaults (Liger kernels, whole-layer ZeRO-3 fetch; results/2026-12-03-ratios-zero3-leaf-h200.md):
# 4.3x at 16,384 and 1.65x at 131,072 (micro-batch 8 x 8, this constant), within 2x. With gpu-cast (one H100,
# results/2026-12-07e-offload-batch.md): 1.35x at 131,072 (16 x 4: 56,288 tokens/s against zero3's 75,827), and 16 x 1
# ran 35,977: the constant stands.
OFFLOAD_TOKENS_PER_STEP = 131_072  # per GPU
OFFLOAD_MAX_GRAD_ACCUM = 16  # beyond the measured range the batch grows more than the step time shrinks
MEASURED = ("ZeRO-3 offload's time per token against ZeRO-3's, one H200, llama-1b: 3.7x at 16,384 tokens per step, "
            "1.5x at 90,112, 1.0-1.2x at 163,840-180,224; 1.65x at 131,072 against the faster ZeRO-3 of 2026-12-03")
# Activation checkpointing recomputes each decoder layer's forward in backward: one more forward, 8N FLOPs per
# token where training costs 6N, so at most a third more time. Issue 18 measured 14% fewer tokens/s with it on the
# Llama-3.2-3B shape on one H200; no file in benchmarks/results/ records that run yet.
# Partial optimizer offload (--offload-ratio R), one H200, llama-1b at the selector's offload batch (micro-batch 32 x 2),
# zero3_offload's defaults since gpu-cast (results/2026-12-07d-pinned-cast.md, calls M and N on one machine): tokens/s at
# each R. Before gpu-cast (micro-batch 8, 2026-12-05b): R = 1 12,265, R = 0.5 19,566, R = 0.25 25,745; R = 1 at
# micro-batch 8 is 21,102 with it
RATIO_MEASURED_AT = "one H200, llama-1b, micro-batch 32 x 2"
RATIO_MEASURED = {1.0: 59_460, 0.1: 70_833}
CHECKPOINTING_MEASURED = "14% fewer tokens/s on the Llama-3.2-3B shape, one H200 (issue 18)"
OFFLOAD_MEASURED = ("ZeRO-3 offload took 1.65-4.3x ZeRO-3's time per token on one H200 (llama-1b, 131,072 and 16,384 "
                    "tokens per step)")


@dataclass(frozen=True)
class Budget:
    """What "fits" means: the memory there is, less the share the user leaves free (--memory-headroom)."""

    hw: Hardware
    headroom: float
    ranks_per_node: int = 1  # CPU runs: every rank of a node shares its memory

    @property
    def gpu_bytes(self) -> int:
        return int(self.hw.gpu_memory_bytes * (1 - self.headroom))

    @property
    def cpu_bytes(self) -> int:
        """A GPU run's CPU side is the measured process (benchmarks/results/2026-12-03-memory-h200.md), kept whole;
        a CPU run's ranks are what the headroom is for."""
        return int(self.hw.cpu_memory_bytes * (1 - (self.headroom if self.hw.accelerator != "gpu" else 0)))

    def describe(self) -> str:
        keep, flag = f"{(1 - self.headroom) * 100:g}%", f"(--memory-headroom {self.headroom:g})"
        if self.hw.accelerator == "gpu":
            return (f"fits = within {keep} of {human_bytes(self.hw.gpu_memory_bytes)} per GPU ({human_bytes(self.gpu_bytes)}) {flag}, "
                    f"and within {human_bytes(self.hw.cpu_memory_bytes)} CPU memory per node")
        return (f"fits = the {self.ranks_per_node} rank(s) of a node within {keep} of its "
                f"{human_bytes(self.hw.cpu_memory_bytes)} ({human_bytes(self.cpu_bytes)}) {flag}")


@dataclass
class Row:
    name: str
    estimate: Optional[Estimate]
    fits: bool
    source: str = "built-in"


@dataclass
class Decision:
    choice: Optional[str]
    """The preset, or None: nothing fits (closest, binding and fixes say what would)."""
    reasons: list[str]
    rows: list[Row] = field(default_factory=list)
    """Every candidate under the activation checkpointing decided below."""
    activation_checkpointing: bool = False
    closest: Optional[str] = None
    binding: Optional[str] = None
    """Nothing fits: `gpu` (every candidate short of GPU memory) or `cpu` (some fit the GPUs, none the CPU memory)."""
    fixes: list[str] = field(default_factory=list)
    message: str = ""
    """Nothing fits: the one line `recipe run --strategy auto` exits with."""


def fits(e: Optional[Estimate], budget: Budget) -> bool:
    """GPU run: the per-rank estimate within one GPU's budget, the CPU side within a node's.
    CPU run: every rank of a node within the node's budget."""
    if e is None:
        return False
    if budget.hw.accelerator == "gpu":
        return e.gpu_bytes <= budget.gpu_bytes and e.cpu_bytes <= budget.cpu_bytes
    return _node_need(e, budget) <= budget.cpu_bytes


def table(candidates: dict[str, tuple[Preset, Optional[Estimate]]], budget: Budget) -> list[Row]:
    return [Row(n, e, fits(e, budget), p.source) for n, (p, e) in candidates.items()]


def estimate_reason(choice: str, e: Estimate, budget: Budget) -> str:
    hw = budget.hw
    if hw.accelerator != "gpu":
        return (f"{choice} is estimated at {human_bytes(e.gpu_bytes)} per rank and {human_bytes(e.cpu_bytes)} CPU per node "
                f"({human_bytes(budget.cpu_bytes)} fit), on {hw.describe()}")
    return (f"{choice} is estimated at {human_bytes(e.gpu_bytes)} per GPU ({human_bytes(budget.gpu_bytes)} fit) and "
            f"{human_bytes(e.cpu_bytes)} CPU per node, on {hw.describe()}")


def choose(budget: Budget, shape: Shape, work: Workload, offload_requested: Optional[str],
           candidates: dict[str, tuple[Preset, Optional[Estimate]]],
           checkpointed: Optional[dict[str, tuple[Preset, Optional[Estimate]]]] = None) -> Decision:
    """Steps 0-3 of the tree and feasibility; step 4, the offload batch, is offload_batch() below.
    candidates: each preset with its estimate for `work`. checkpointed: the same with activation checkpointing on,
    when the user did not say either way; None: work.activation_checkpointing is the user's word and stands."""
    hw, reasons = budget.hw, []
    # 0. Activation checkpointing, when not given: off, unless only it lets the run fit with less CPU offload.
    checkpointing = work.activation_checkpointing
    if checkpointed is not None:
        checkpointing, why = _checkpointing(budget, candidates, checkpointed, offload_requested)
        candidates, reasons = (checkpointed if checkpointing else candidates), reasons + why
    rows = table(candidates, budget)
    fitting = {r.name for r in rows if r.fits}
    est = {n: e for n, (_, e) in candidates.items()}
    size = f"{shape.params / 1e9:.2f}B" if shape.params >= 1e9 else f"{shape.params / 1e6:.2f}M"
    non_offload = [n for n, (p, e) in candidates.items() if p.capabilities.offload == "none" and e is not None]

    # The tree's branches are roles that presets declare (Capabilities.selector_role): core names no preset.
    role = {}
    for n, (p, _) in candidates.items():
        if p.capabilities.selector_role and p.capabilities.selector_role not in role:
            role[p.capabilities.selector_role] = n
    offload_opt, offload_all = role.get("offload_optimizer"), role.get("offload_all")

    # 1. Offload asked for, or nothing without offload fits on the GPUs (even with checkpointing, when it was
    #    not given) while CPU memory suffices.
    if offload_requested:
        choice = offload_all if offload_requested == "all" else offload_opt
        reasons.append(f"CPU offload of the {'optimizer and parameters' if offload_requested == 'all' else 'optimizer'} "
                       f"was asked for: {choice}")
    elif hw.accelerator == "gpu" and not fitting.intersection(non_offload) and fitting.intersection({offload_opt, offload_all}):
        choice = offload_opt
        reasons.append(f"no strategy without offload fits in {human_bytes(budget.gpu_bytes)} per GPU"
                       + ("" if checkpointed is None else ", with activation checkpointing or without")
                       + f", and CPU memory ({human_bytes(budget.cpu_bytes)} per node) holds the offloaded optimizer: {offload_opt}")
        if offload_opt not in fitting:
            choice = offload_all
            reasons.append(f"optimizer offload alone does not fit: parameters go to CPU too ({offload_all})")
    # 2. No offload, under 10B parameters: the small-model branch (FSDP).
    elif shape.params < LARGE_MODEL_PARAMS:
        choice = role.get("small")
        reasons.append(f"{size} parameters (< 10B) and no offload needed: {choice}")
    # 3. No offload, 10B or more: ZeRO-2 on one node of fewer than 8 GPUs when it fits, else ZeRO-3.
    elif hw.num_nodes == 1 and hw.gpus_per_node < 8 and role.get("large_single_node") in fitting:
        choice = role["large_single_node"]
        reasons.append(f"{size} parameters (>= 10B) on one node of {hw.gpus_per_node} GPU(s) (< 8), "
                       f"and {choice} fits ({human_bytes(est[choice].gpu_bytes)} per GPU of {human_bytes(budget.gpu_bytes)}): {choice}")
    else:
        choice = role.get("large")
        why = "several nodes" if hw.num_nodes > 1 else (
            f"{hw.gpus_per_node} GPUs on the node" if hw.gpus_per_node >= 8 else f"{role.get('large_single_node')} does not fit")
        reasons.append(f"{size} parameters (>= 10B), {why}: {choice}")

    # Feasibility: a choice that will not fit moves to the next strategy in memory order.
    if choice not in fitting:
        # Memory order: strategies without offload first (no CPU round trips), each group largest first.
        offloads = {n: p.capabilities.offload != "none" for n, (p, _) in candidates.items()}
        order = sorted((n for n, e in est.items() if e is not None), key=lambda n: (offloads[n], -est[n].gpu_bytes))
        below = order[order.index(choice) + 1:] if choice in order else order
        nxt = next((n for n in below if n in fitting), None)
        if nxt is None:
            return _nothing_fits(budget, shape, dataclasses.replace(work, activation_checkpointing=checkpointing),
                                 candidates, rows, user_said_checkpointing=checkpointed is None)
        if choice is None:
            reasons.append(f"no installed preset declares this branch (Capabilities.selector_role): {nxt}, the first "
                           f"that fits in memory order ({human_bytes(est[nxt].gpu_bytes)} per GPU)")
        else:
            need = (f"{human_bytes(est[choice].gpu_bytes)} per GPU and {human_bytes(est[choice].cpu_bytes)} CPU per node"
                    if est.get(choice) else "memory it has no estimate for")
            reasons.append(f"{choice} would need {need}, more than fits ({human_bytes(budget.gpu_bytes)} per GPU, "
                           f"{human_bytes(budget.cpu_bytes)} CPU per node): moved to {nxt}, the next in memory order "
                           f"({human_bytes(est[nxt].gpu_bytes)} per GPU)")
        choice = nxt
    return Decision(choice=choice, reasons=reasons, rows=rows, activation_checkpointing=checkpointing)


def _checkpointing(budget: Budget, plain: dict, checkpointed: dict, offload_requested: Optional[str]) -> tuple[bool, list[str]]:
    """Without CPU offload, then with it (only the kind asked for with --offload): the first group that fits
    without checkpointing leaves it off, else the first that fits with it turns it on. Checkpointing costs
    CHECKPOINTING_MEASURED, offload several times that (MEASURED). Nothing fits at all: on, the smaller need."""
    groups = [(offload_requested,)] if offload_requested else [("none",), ("optimizer", "all")]
    for offloads in groups:
        if _fitting(plain, budget, offloads):
            return False, []
        with_it = _fitting(checkpointed, budget, offloads)
        if with_it and offloads == ("none",):
            return True, [f"activation checkpointing on: no strategy without CPU offload fits in {human_bytes(budget.gpu_bytes)} "
                          f"per GPU without it, and {', '.join(with_it)} with it; it costs {CHECKPOINTING_MEASURED}, "
                          f"where {OFFLOAD_MEASURED}; --no-activation-checkpointing keeps it off"]
        if with_it:
            return True, [f"activation checkpointing on: nothing fits in {human_bytes(budget.gpu_bytes)} per GPU without it, CPU "
                          f"offload included, and {', '.join(with_it)} with it; --no-activation-checkpointing keeps it off"]
    return True, []


def _fitting(candidates: dict, budget: Budget, offloads: tuple[str, ...]) -> list[str]:
    return [n for n, (p, e) in candidates.items() if p.capabilities.offload in offloads and fits(e, budget)]


def offload_batch(hw: Hardware, work: Workload, offloads: bool, grad_accum: Optional[int]) -> tuple[Optional[int], list[str]]:
    """4. The batch, for CPU offload on GPUs: enough micro-batches per step to amortise the CPU optimizer step.

    Called once the micro-batch is final (`--micro-batch-size auto` decides it after the choice). grad_accum:
    the user's (--grad-accum, or what --global-batch-size implies), or None. Returns (picked or None, reasons)."""
    if hw.accelerator != "gpu" or not offloads:
        return None, []
    per_micro_batch = work.micro_batch_size * work.seq_len
    wanted = max(1, math.ceil(OFFLOAD_TOKENS_PER_STEP / per_micro_batch))
    if grad_accum is not None:
        return None, ([f"--grad-accum {grad_accum} kept as given; {min(wanted, OFFLOAD_MAX_GRAD_ACCUM)} would amortise "
                       f"the CPU optimizer step ({MEASURED})"] if grad_accum < wanted else [])
    if wanted == 1:
        return None, []
    picked = min(wanted, OFFLOAD_MAX_GRAD_ACCUM)
    tokens = picked * per_micro_batch
    return picked, [f"gradient accumulation {picked}: {tokens:,} tokens per GPU per optimizer step amortise the "
                    f"CPU optimizer step ({MEASURED}); --grad-accum N overrides"
                    + ("" if tokens >= OFFLOAD_TOKENS_PER_STEP else
                       f"; capped at {OFFLOAD_MAX_GRAD_ACCUM}: a larger --micro-batch-size, if it fits, is faster")]


OFFLOAD_RATIOS = (0.1, 0.25, 0.5, 0.75)  # the CPU shares of the optimizer tried, smallest (fastest) first


def offload_ratio(budget: Budget, estimate_at: Callable[[float], Optional[Estimate]],
                  chosen: bool) -> tuple[Optional[float], list[str], list[str]]:
    """5. The CPU share of an offloaded optimizer (GPU runs; the preset keeps part of it on the GPU, and no
    --offload-ratio was given): the smallest of OFFLOAD_RATIOS whose estimate fits. estimate_at(R): the run's
    estimate with R of the optimizer on the CPU. chosen (the selector chose offload itself, under `auto` without
    --offload): the run takes it, said in the reasons; else it is a hint and the run keeps all of it on the CPU.
    Returns (the share the run takes, or None; reasons; hints)."""
    if budget.hw.accelerator != "gpu" or budget.hw.gpu_memory_bytes == 0:
        return None, [], []
    for ratio in OFFLOAD_RATIOS:
        e = estimate_at(ratio)
        if e is None or not fits(e, budget):
            continue
        measured = ", ".join(f"R = {r:g} {t / RATIO_MEASURED[1.0]:.2f}x" for r, t in sorted(RATIO_MEASURED.items(), reverse=True)
                             if r < 1)
        speed = f"{RATIO_MEASURED_AT}: {measured} R = 1's tokens/s"
        if chosen:
            return ratio, [f"--offload-ratio {ratio:g}: the smallest CPU share of the optimizer that fits "
                           f"({human_bytes(e.gpu_bytes)} per GPU); {1 - ratio:.0%} of it steps on the GPU ({speed}); "
                           f"--offload-ratio 1 keeps all of it on the CPU"], []
        return None, [], [f"--offload-ratio {ratio:g} would also fit ({human_bytes(e.gpu_bytes)} per GPU) and step "
                          f"{1 - ratio:.0%} of the optimizer on the GPU ({speed}); the run keeps all of it on the CPU as asked"]
    return None, [], []


def _nothing_fits(budget: Budget, shape: Shape, work: Workload, candidates: dict, rows: list[Row],
                  user_said_checkpointing: bool) -> Decision:
    """No candidate fits: the closest by the memory that binds, and only the fixes that reduce that memory.
    Every candidate short of GPU memory: the smallest GPU need. Some fit the GPUs but none the CPU memory per node:
    the smallest CPU need among those. A CPU run: the smallest need per node."""
    hw, ac = budget.hw, work.activation_checkpointing
    known = {n: (p, e) for n, (p, e) in candidates.items() if e is not None}
    if not known:
        msg = "no strategy fits: no preset that runs here has a memory model; name one with --strategy"
        return Decision(None, [msg], rows, ac, message=msg)
    on_gpus = [n for n, (_, e) in known.items() if hw.accelerator == "gpu" and e.gpu_bytes <= budget.gpu_bytes]
    if hw.accelerator != "gpu":
        binding, need, have, total, unit = "cpu", (lambda e: _node_need(e, budget)), budget.cpu_bytes, hw.cpu_memory_bytes, "per node"
    elif on_gpus:
        binding, need, have, total, unit = "cpu", (lambda e: e.cpu_bytes), budget.cpu_bytes, hw.cpu_memory_bytes, "CPU per node"
    else:
        binding, need, have, total, unit = "gpu", (lambda e: e.gpu_bytes), budget.gpu_bytes, hw.gpu_memory_bytes, "per GPU"
    closest = min(on_gpus or known, key=lambda n: need(known[n][1]))
    preset, e = known[closest]
    again = _again(preset, shape, work)
    fixes = _more_nodes(again, need, have, work, closest, "more GPUs" if binding == "gpu" else "more nodes", unit)
    if binding == "gpu" or hw.accelerator != "gpu":  # memory per rank binds
        if not ac:
            fixes.append(f"--activation-checkpointing, which you turned off ({closest}: {human_bytes(need(again(activation_checkpointing=True)))} "
                         f"{unit} with it)")
        if work.micro_batch_size > 1:
            fixes.append(f"a smaller --micro-batch-size (now {work.micro_batch_size}; {closest} at 1: "
                         f"{human_bytes(need(again(micro_batch_size=1)))} {unit})")
        if hw.accelerator == "gpu" and preset.capabilities.offload == "none":
            fixes.append("CPU offload (--offload optimizer, or all)")
        if hw.accelerator != "gpu":
            fixes.append(f"nodes with more memory ({closest} needs {human_bytes(need(e))} per node; --cpu-memory-gib plans for them)")
    else:  # CPU memory per node binds
        fixes.insert(0, f"nodes with more CPU memory ({closest} needs {human_bytes(need(e))} per node; --cpu-memory-gib plans for them)")
        level = OFFLOAD_LEVELS.index
        less = [n for n, (p, o) in known.items()
                if level(p.capabilities.offload) < level(preset.capabilities.offload) and o.cpu_bytes < e.cpu_bytes]
        if less:  # it is short of GPU memory (else it would be the closest): how many nodes would hold it
            n = min(less, key=lambda n: known[n][1].cpu_bytes)
            o = known[n][1]
            nodes = _more_nodes(_again(known[n][0], shape, work), lambda x: x.gpu_bytes, budget.gpu_bytes, work, n,
                                "more GPUs", "per GPU")
            if nodes:
                fixes.append(f"less CPU offload: {n} needs {human_bytes(o.cpu_bytes)} CPU per node but {human_bytes(o.gpu_bytes)} per GPU; "
                             + nodes[0])
    if need(e) <= total:
        fixes.append(f"--memory-headroom {math.floor((1 - need(e) / total) * 100) / 100:g} or less ({closest} needs "
                     f"{human_bytes(need(e))} of {human_bytes(total)} {unit}, leaving less room for what the estimate misses)")
    short = ("every strategy is short of GPU memory" if binding == "gpu" else
             f"{len(on_gpus)} fit the GPUs but none the CPU memory" if hw.accelerator == "gpu" else
             "every strategy is short of memory")
    summary = (f"{short}; the closest, {closest}, needs {human_bytes(need(e))} {unit} where {human_bytes(have)} fit "
               f"({(1 - budget.headroom) * 100:g}% of {human_bytes(total)}, --memory-headroom {budget.headroom:g})")
    why = [] if user_said_checkpointing or not ac else [
        "activation checkpointing on in this table: nothing fits without it either"]
    message = f"no strategy fits on {hw.describe()}: {summary}; try {'; '.join(fixes) or 'a larger machine'}"
    return Decision(None, why + [summary], rows, ac, closest=closest, binding=binding, fixes=fixes, message=message)


def _again(preset: Preset, shape: Shape, work: Workload):
    """The preset's estimate for the workload with some fields changed."""
    return lambda **change: preset.build().estimate(shape, dataclasses.replace(work, **change))


def _more_nodes(again, need, have: int, work: Workload, name: str, what: str, unit: str) -> list[str]:
    """More nodes, only where they shrink the preset's need: the fewest (up to 16x) that fit it."""
    now, more = again(), again(num_nodes=work.num_nodes * 2)
    if now is None or more is None or need(more) >= need(now):
        return []
    for nodes in (work.num_nodes * k for k in (2, 4, 8, 16)):
        e = again(num_nodes=nodes)
        if e is not None and need(e) <= have:
            return [f"{what}: {nodes} nodes (--num-nodes {nodes}) bring {name} to {human_bytes(need(e))} {unit}"]
    return [f"{what} ({'--gpus, ' if what == 'more GPUs' else ''}--num-nodes): {name}'s share shrinks with them"]


def _node_need(e: Estimate, budget: Budget) -> int:
    return e.gpu_bytes * budget.ranks_per_node + e.cpu_bytes
