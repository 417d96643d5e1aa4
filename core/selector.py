"""Which strategy to run: the owner's decision tree, then feasibility against the memory estimate.

Every branch returns its reason, so `recipe plan` and `recipe run --strategy auto` can say why.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from shardlab.core.errors import UserError
from shardlab.core.hardware import GiB, Hardware
from shardlab.core.memory import Estimate, Shape, Workload
from shardlab.core.registry import Preset

LARGE_MODEL_PARAMS = 10e9  # the tree's split between FSDP and DeepSpeed

# CPU offload steps the optimizer on the CPU once per optimizer step (~1 s for llama-1b on 16 cores) and
# copies gradients to the CPU once per micro-batch: enough tokens per step make both small next to forward
# and backward. Measured on one H200 (llama-1b, seq 2048, results/2026-12-02-offload-and-ratios-h200.md),
# zero3_offload's time per token against zero3's (micro-batch 8, one per step): 3.7x at 16,384 tokens per
# step, 1.5x at 90,112 (mean), 1.2x at 180,224 (micro-batch 8 x 11), 1.0x at 163,840 (micro-batch 16 x 5).
# With the 2026-12-03 defaults (Liger kernels, whole-layer ZeRO-3 fetch; results/2026-12-03-ratios-zero3-leaf-h200.md):
# 4.3x at 16,384 and 1.65x at 131,072 (micro-batch 8 x 8, this constant), within 2x.
OFFLOAD_TOKENS_PER_STEP = 131_072  # per GPU
OFFLOAD_MAX_GRAD_ACCUM = 16  # beyond the measured range the batch grows more than the step time shrinks
MEASURED = ("ZeRO-3 offload's time per token against ZeRO-3's, one H200, llama-1b: 3.7x at 16,384 tokens per step, "
            "1.5x at 90,112, 1.0-1.2x at 163,840-180,224; 1.65x at 131,072 against the faster ZeRO-3 of 2026-12-03")


@dataclass
class Row:
    name: str
    estimate: Optional[Estimate]
    fits: bool
    source: str = "built-in"


@dataclass
class Decision:
    choice: str
    reasons: list[str]
    rows: list[Row] = field(default_factory=list)


def fits(e: Optional[Estimate], hw: Hardware) -> bool:
    """GPU run: the per-rank estimate within one GPU, the CPU side within a node's memory.
    CPU run: every rank of a node in the node's memory."""
    if e is None:
        return False
    if hw.accelerator == "gpu":
        return e.gpu_bytes <= hw.gpu_memory_bytes and e.cpu_bytes <= hw.cpu_memory_bytes
    ranks = max(1, hw.world_size // hw.num_nodes)
    return e.gpu_bytes * ranks + e.cpu_bytes <= hw.cpu_memory_bytes


def estimate_reason(choice: str, e: Estimate, hw: Hardware) -> str:
    return (f"{choice} is estimated at {_gib(e.gpu_bytes)} per {'GPU' if hw.accelerator == 'gpu' else 'rank'} "
            f"and {_gib(e.cpu_bytes)} CPU per node, on {hw.describe()}")


def _gib(b: int) -> str:
    return f"{b / GiB:.1f} GiB"


def choose(hw: Hardware, shape: Shape, work: Workload, offload_requested: Optional[str],
           candidates: dict[str, tuple[Preset, Optional[Estimate]]]) -> Decision:
    """Steps 1-3 of the tree and feasibility; step 4, the offload batch, is offload_batch() below."""
    rows = [Row(n, e, fits(e, hw), p.source) for n, (p, e) in candidates.items()]
    fitting = {r.name for r in rows if r.fits}
    est = {n: e for n, (_, e) in candidates.items()}
    reasons: list[str] = []
    size = f"{shape.params / 1e9:.2f}B" if shape.params >= 1e9 else f"{shape.params / 1e6:.2f}M"
    non_offload = [n for n, (p, e) in candidates.items() if p.capabilities.offload == "none" and e is not None]

    # The tree's branches are roles that presets declare (Capabilities.selector_role): core names no preset.
    role = {}
    for n, (p, _) in candidates.items():
        if p.capabilities.selector_role and p.capabilities.selector_role not in role:
            role[p.capabilities.selector_role] = n
    offload_opt, offload_all = role.get("offload_optimizer"), role.get("offload_all")

    # 1. Offload asked for, or nothing without offload fits on the GPUs while CPU memory suffices.
    if offload_requested:
        choice = offload_all if offload_requested == "all" else offload_opt
        reasons.append(f"CPU offload of the {'optimizer and parameters' if offload_requested == 'all' else 'optimizer'} "
                       f"was asked for: {choice}")
    elif hw.accelerator == "gpu" and not fitting.intersection(non_offload) and fitting.intersection({offload_opt, offload_all}):
        choice = offload_opt
        reasons.append(f"no strategy without offload fits in {_gib(hw.gpu_memory_bytes)} per GPU, and CPU memory "
                       f"({_gib(hw.cpu_memory_bytes)} per node) holds the offloaded optimizer: {offload_opt}")
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
                       f"and {choice} fits ({_gib(est[choice].gpu_bytes)} per GPU): {choice}")
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
        need = _gib(est[choice].gpu_bytes) if est.get(choice) else "no estimate"
        if nxt is None:
            raise UserError(_nothing_fits(hw, work, est, offloads))
        if choice is None:
            reasons.append(f"no installed preset declares this branch (Capabilities.selector_role): {nxt}, the first "
                           f"that fits in memory order ({_gib(est[nxt].gpu_bytes)} per GPU)")
        else:
            reasons.append(f"{choice} would need {need} per GPU and {_gib(est[choice].cpu_bytes) if est.get(choice) else '?'} "
                           f"CPU per node, more than there is: moved to {nxt}, the next in memory order "
                           f"({_gib(est[nxt].gpu_bytes)} per GPU)")
        choice = nxt
    reasons.append(estimate_reason(choice, est[choice], hw))

    return Decision(choice=choice, reasons=reasons, rows=rows)


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


def _nothing_fits(hw: Hardware, work: Workload, est: dict[str, Optional[Estimate]], offloads: dict[str, bool]) -> str:
    known = {n: e for n, e in est.items() if e is not None}
    smallest = min(known, key=lambda n: known[n].gpu_bytes)
    e = known[smallest]
    ideas = ["more GPUs (--gpus, --num-nodes)"]
    if not offloads[smallest]:
        ideas.append("CPU offload (--offload optimizer or all)")
    if e.cpu_bytes > hw.cpu_memory_bytes:
        ideas.append("more CPU memory per node")
    if not work.activation_checkpointing:
        ideas.append("--activation-checkpointing")
    if work.micro_batch_size > 1:
        ideas.append(f"a smaller --micro-batch-size (now {work.micro_batch_size})")
    where = "per GPU" if hw.accelerator == "gpu" else "per rank"
    return (f"no strategy fits: the smallest, {smallest}, needs {_gib(e.gpu_bytes)} {where} and {_gib(e.cpu_bytes)} "
            f"CPU per node on {hw.describe()}; try {', '.join(ideas)}")
