"""fsdp's `clip-in-adamw` lever (`--experiments clip-in-adamw`): the gradient clip folded into the fused AdamW's step.

torch's clip_grad_norm_ takes the global norm (one foreach kernel) and then multiplies every gradient by the clip
factor: a pass that reads and writes all the fp32 gradients (9.5 ms a step on the 3B shape on one H100, 3.2 ms on
llama-1b; results/2026-12-05e-h100/profile-fsdp-*.txt). Here the norm is taken the same way and the factor goes to
the fused AdamW as its `grad_scale` (torch's own route for GradScaler, a public attribute its step reads): its kernel
divides each gradient by it while it steps, so the separate pass is gone (the kernel writes the divided gradient back
as it does under GradScaler: one write, not a read and a write). zero3's fused-step clips the same way, so an A/B of
the two rounds the clip alike.

Arithmetic: where the norm is under the threshold the factor is 1 and the step is the same to the bit; where it
clips, the gradient is divided by (norm + 1e-6) / max_norm instead of multiplied by max_norm / (norm + 1e-6): at most
one rounding apart (tests/strategies/test_fsdp_clip_in_adamw.py). The optimizer becomes torch's fused AdamW on any
device (on CPU too, where fsdp otherwise steps with the foreach one).

Measured (one H100, torch 2.11; results/2026-12-05f-h100.md), against direct-cast alone in the same call: llama-1b
micro-batch 8 67,780 against 67,214 tokens/s (+0.8%) and 66,278 against 65,423 (+1.3%, another machine), the 3B shape
micro-batch 4 21,893 against 21,684 (+1.0%); the peak the same to the byte. fsdp's default with direct-cast.
`SHARDLAB_AB=clip-in-adamw` switches it off (torch's clip, the same fused AdamW) and on between steps of one run.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from shardlab.core import trace
from shardlab.strategies._common import clip_divisor

if TYPE_CHECKING:
    import torch


def clip(model: torch.nn.Module, max_norm: float, optimizer: torch.optim.Optimizer) -> None:
    """The global norm of the gradients (torch's foreach norm, as clip_grad_norm_), and its clip factor as the fused
    AdamW's divisor for the coming step (1 where the norm is under `max_norm`)."""
    import torch
    from torch.distributed.tensor import DTensor

    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norm = torch.nn.utils.get_total_norm(grads, foreach=True)
    if isinstance(norm, DTensor):  # FSDP2: a partial norm on each rank; the whole one on all
        norm = norm.full_tensor()
    optimizer.grad_scale = clip_divisor(norm.float(), max_norm)
    trace.note("fsdp-clip-in-adamw")


def clear(optimizer: torch.optim.Optimizer) -> None:
    """After the step: no later step (one without clipping) may divide by a stale factor."""
    optimizer.grad_scale = None
