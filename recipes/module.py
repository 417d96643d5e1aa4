"""The Llama LightningModule: one training step for every strategy, through the Strategy interface only."""
from __future__ import annotations

from typing import Optional

import lightning.pytorch as pl
import torch

from shardlab.core.strategy import ModelSource, OptimizerSpec, RunContext, Strategy


class LlamaModule(pl.LightningModule):
    def __init__(self, source: ModelSource, strategy: Strategy, ctx: RunContext, optim: OptimizerSpec) -> None:
        super().__init__()
        self.source, self.strategy, self.ctx, self.optim = source, strategy, ctx, optim
        self.model: Optional[torch.nn.Module] = None
        self.last_loss: Optional[torch.Tensor] = None

    def configure_model(self) -> None:
        if self.model is None:  # Lightning may call this more than once
            self.model = self.strategy.build_model(self.source, self)
            self.model.train()  # from_pretrained hands back eval mode
            if self.ctx.activation_checkpointing:
                self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        loss = self.model(input_ids=batch, labels=batch).loss
        self.last_loss = loss.detach()
        return loss

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        # Through the strategy, not Lightning's clip_gradients: Lightning refuses fused AdamW there.
        if gradient_clip_val:
            self.strategy.clip_gradients(self.model, gradient_clip_val)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return self.strategy.optimizer(self.model.parameters(), self.optim, self.ctx)
