"""DDP: every rank holds the whole model; gradients are all-reduced."""
from __future__ import annotations

from typing import Optional

import torch
from lightning.pytorch.strategies import DDPStrategy

from shardlab.core.registry import Preset, register
from shardlab.core import memory
from shardlab.core.external import accelerate_base
from shardlab.core.errors import UserError
from shardlab.core.strategy import Capabilities, PrecisionPlan, RunContext, Strategy, dtype_name
from shardlab.strategies._common import is_rank_zero, process_group_backend, to_cpu_fp32


class DDP(Strategy):
    def lightning_strategy(self, ctx: RunContext) -> DDPStrategy:
        return DDPStrategy(process_group_backend=process_group_backend(ctx))

    def check(self, ctx: RunContext) -> None:
        super().check(ctx)
        natural = dtype_name(ctx.precision, "storage")
        if ctx.grad_reduce_dtype not in ("auto", natural):
            raise UserError(f"--grad-reduce-dtype {ctx.grad_reduce_dtype}: ddp reduces gradients in the parameters' "
                            f"dtype ({natural} under {ctx.precision}); use auto")

    def precision_plan(self, ctx: RunContext) -> PrecisionPlan:
        storage = dtype_name(ctx.precision, "storage")  # DDP all-reduces the gradients in the parameters' dtype
        return PrecisionPlan(compute=dtype_name(ctx.precision, "compute"), master=storage,
                             grad_reduce=storage, optimizer_states=storage)

    def external_config(self, fmt: str, ctx: RunContext, spec) -> dict:
        if fmt != "accelerate":
            return super().external_config(fmt, ctx, spec)
        return accelerate_base(ctx, "MULTI_GPU" if ctx.accelerator == "gpu" else "MULTI_CPU")

    def model_state_bytes(self, shape, work):
        return memory.ddp_states(shape.params, work)

    def full_state_dict(self, model: torch.nn.Module) -> Optional[dict[str, torch.Tensor]]:
        return to_cpu_fp32(model.state_dict()) if is_rank_zero() else None


register(Preset(
    name="ddp", strategy_cls=DDP, family="ddp",
    description="PyTorch DDP: full replica per rank, gradients all-reduced",
    # --compile: +9% tokens/s on one H200 (llama-1b, with --chunked-loss; results/2026-12-02-gpu-strategies-h200.md)
    capabilities=Capabilities(compile_by_default=True),
))
