"""Helpers the adapters share: process-group backend, rank-zero test, fp32 CPU copies of a state dict."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from shardlab.core.strategy import RunContext

if TYPE_CHECKING:  # imported where used: the adapters' modules load without torch (`recipe plan`, `strategies`)
    import torch


def process_group_backend(ctx: RunContext) -> str:
    return "nccl" if ctx.accelerator == "gpu" else "gloo"


def is_rank_zero() -> bool:
    import torch.distributed as dist

    return not dist.is_initialized() or dist.get_rank() == 0


def to_cpu_fp32(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    import torch

    return {k: v.detach().to("cpu", torch.float32).clone() for k, v in state.items()}


def clip_divisor(norm: torch.Tensor, max_norm: float) -> torch.Tensor:
    """What a fused AdamW's `grad_scale` divides every gradient by (its kernel does, while it steps) to clip them to a
    global norm of `max_norm`: (norm + 1e-6) / max_norm where that is over 1, else 1. torch's clip_grad_norm_ multiplies
    by the reciprocal instead, in a pass of its own. fsdp's clip-in-adamw and zero3's fused-step both clip this way."""
    import torch

    return torch.clamp((norm + 1e-6) / max_norm, min=1.0)


# Portable checkpoints (recipes/portable.py): every backend steps an Adam whose per-tensor state is
# {"step", "exp_avg", "exp_avg_sq"}: torch's AdamW (DDP, FSDP2, DeepSpeed's ZeRO over its flat fp32
# partitions) or DeepSpeedCPUAdam (ZeRO-Offload: the same keys, `step` a Python int). Both create that
# state lazily at the first step; a resume fills it before the first step instead.
def adam_step(optimizer: torch.optim.Optimizer) -> int:
    """The Adam step count (every tensor's is the same: shardlab steps all parameters together)."""
    for state in optimizer.state.values():
        if "step" in state:
            return int(float(state["step"]))
    return 0


def ensure_adam_state(optimizer: torch.optim.Optimizer, step: int, params: Optional[list] = None) -> None:
    """Every parameter's Adam state exists (zeros where the optimizer has not stepped yet), at `step`.
    params: the tensors it steps when its param_groups do not list them (ZeRO-3 fills them only during its step).

    The step's form follows the optimizer's own lazy initialisation: torch's AdamW keeps a 0-dim float32
    tensor (on the parameter's device when fused or capturable), DeepSpeedCPUAdam a Python int."""
    import torch

    cpu_adam = type(optimizer).__name__ == "DeepSpeedCPUAdam"
    groups = optimizer.param_groups if params is None else [{**optimizer.param_groups[0], "params": params}]
    for group in groups:
        for p in group["params"]:
            state = optimizer.state[p]
            if "exp_avg" not in state:
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            # under partial offload a ZeRO-3 partition on the GPU steps with torch's AdamW (deepspeed_lightning.py)
            if cpu_adam and p.device.type == "cpu":
                state["step"] = int(step)
            elif isinstance(state.get("step"), torch.Tensor):
                state["step"] = torch.full_like(state["step"], float(step))
            else:
                on_device = group.get("fused") or group.get("capturable")
                state["step"] = torch.tensor(float(step), dtype=torch.float32,
                                             device=p.device if on_device else "cpu")
