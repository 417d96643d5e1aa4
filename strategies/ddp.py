"""DDP: every rank holds the whole model; gradients are all-reduced."""
from __future__ import annotations

from typing import Optional

import torch
from lightning.pytorch.strategies import DDPStrategy

from shardlab.core.registry import Preset, register
from shardlab.core.strategy import Capabilities, RunContext, Strategy
from shardlab.strategies._cpu import is_rank_zero, process_group_backend, to_cpu_fp32


class DDP(Strategy):
    def lightning_strategy(self, ctx: RunContext) -> DDPStrategy:
        return DDPStrategy(process_group_backend=process_group_backend(ctx))

    def full_state_dict(self, model: torch.nn.Module) -> Optional[dict[str, torch.Tensor]]:
        return to_cpu_fp32(model.state_dict()) if is_rank_zero() else None


register(Preset(
    name="ddp", strategy_cls=DDP, family="ddp",
    description="PyTorch DDP: full replica per rank, gradients all-reduced",
    capabilities=Capabilities(),
))
