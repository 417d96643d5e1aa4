"""The Llama LightningModule: one training step for every strategy, through the Strategy interface only."""
from __future__ import annotations

import math
from typing import Optional, Union

import lightning.pytorch as pl
import torch

from shardlab.core import trace
from shardlab.core.strategy import ModelSource, OptimizerSpec, RunContext, Strategy
from shardlab.recipes.loss import causal_lm_loss, use_chunked_loss


class LlamaModule(pl.LightningModule):
    def __init__(self, source: ModelSource, strategy: Strategy, ctx: RunContext, optim: OptimizerSpec) -> None:
        super().__init__()
        self.source, self.strategy, self.ctx, self.optim = source, strategy, ctx, optim
        self.model: Optional[torch.nn.Module] = None
        self.last_loss: Optional[torch.Tensor] = None

    def configure_model(self) -> None:
        if self.model is not None:  # Lightning may call this more than once
            return
        model = self.strategy.build_model(self.source, self, self.ctx)
        model.train()  # from_pretrained hands back eval mode
        if self.ctx.float8:
            from shardlab.recipes import float8
            if not float8.count(model):  # FSDP2 converts before it shards (float8 all-gather), the others here
                float8.convert(model)
        if self.ctx.activation_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if self.ctx.kernels == "liger":  # under compile only its loss (recipes/kernels.py)
            from shardlab.recipes.kernels import use_liger
            use_liger(model, layers=not self.ctx.compile)
        if self.ctx.fused_adds:  # after Liger's layers, whose norm takes the attention's residual add (never compiled:
            from shardlab.recipes import fused_adds  # the two are refused together)
            fused_adds.use(model, liger=self.ctx.kernels == "liger")
        if self.ctx.compile:
            compile_layers(model)
        if self.ctx.chunked_loss and self.ctx.kernels != "liger":  # Liger's loss is chunked already
            use_chunked_loss(model)
        self.model = model

    def training_step(self, batch: Union[torch.Tensor, dict], batch_idx: int) -> torch.Tensor:
        if trace.enabled() and any(p.grad is not None for p in self.model.parameters()):
            trace.note("forward-with-gradients")  # tests check none live from the step before (release_gradients)
        if isinstance(batch, dict):  # chat or instruction data: targets where labels are not -100 (recipes/data.py)
            loss = causal_lm_loss(self.model, batch["input_ids"], batch["labels"], self.divisor(batch["step_label_tokens"]))
        else:  # text: every token
            loss = causal_lm_loss(self.model, batch)
        self.last_loss = loss.detach()
        return loss

    def summed_loss(self, input_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The next-token losses of the targets (labels other than -100) summed, not averaged: validation adds them
        over micro-batches and ranks before it divides (recipes/validation.py)."""
        return causal_lm_loss(self.model, input_ids, labels, torch.ones((), device=input_ids.device))

    def divisor(self, step_label_tokens: torch.Tensor) -> torch.Tensor:
        """What a micro-batch's summed target losses are divided by, so that the optimizer step's loss is the mean over
        the targets of its whole global batch: those targets (N, the same in every item) over the step's
        micro-batches (world size x accumulation), which Lightning (1/accumulation) and the backends' gradient
        averaging (1/world size) divide out again. Every split of a global batch then gives it the same gradient (a
        mean per micro-batch would weigh a target by how many share its micro-batch); Hugging Face's Trainer divides
        by num_items_in_batch for the same reason. A global batch without targets gives loss 0."""
        n = step_label_tokens[0].clamp(min=1).float()
        return n / (self.ctx.world_size * self.ctx.grad_accum)

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None) -> None:
        super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)
        self.strategy.release_gradients(optimizer)  # not in the next step's closure, after its forward
        self.strategy.after_optimizer_step(self.model, self.ctx)

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        # Through the strategy, not Lightning's clip_gradients: Lightning refuses fused AdamW there.
        if gradient_clip_val:
            self.strategy.clip_gradients(self.model, gradient_clip_val)

    def configure_optimizers(self):
        optimizer = self.strategy.optimizer(self.model.parameters(), self.optim, self.ctx)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor(self.optim))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


def compile_layers(model: torch.nn.Module) -> None:
    """torch.compile each decoder layer's forward, in place (after the strategy has sharded the model).

    Only `forward` is compiled: the backends' module hooks (FSDP2's all-gather, ZeRO-3's parameter
    fetch) stay outside the compiled region, and parameter names do not change (no `_orig_mod.`).
    """
    for layer in model.model.layers:
        layer.forward = torch.compile(layer.forward)


def lr_factor(spec: OptimizerSpec):
    """Multiplier of the peak lr at optimizer step i (0-based): linear warm-up, then constant or decay."""
    def factor(i: int) -> float:
        if i < spec.warmup_steps:
            return (i + 1) / (spec.warmup_steps + 1)
        if spec.schedule == "constant":
            return 1.0
        progress = min(1.0, (i - spec.warmup_steps) / max(1, spec.total_steps - spec.warmup_steps))
        shape = 0.5 * (1 + math.cos(math.pi * progress)) if spec.schedule == "cosine" else 1 - progress
        return spec.min_lr_ratio + (1 - spec.min_lr_ratio) * shape
    return factor
