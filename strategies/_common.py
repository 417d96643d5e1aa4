"""Helpers the adapters share: process-group backend, rank-zero test, fp32 CPU copies of a state dict."""
from __future__ import annotations

import torch
import torch.distributed as dist

from shardlab.core.strategy import RunContext


def process_group_backend(ctx: RunContext) -> str:
    return "nccl" if ctx.accelerator == "gpu" else "gloo"


def is_rank_zero() -> bool:
    return not dist.is_initialized() or dist.get_rank() == 0


def to_cpu_fp32(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu", torch.float32).clone() for k, v in state.items()}
