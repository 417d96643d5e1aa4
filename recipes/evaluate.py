"""The validation loss inside a running Trainer (recipes/validation.py chooses the blocks and deals them to the
ranks): the callback that validates at step boundaries, and the evaluation. Apart from recipes/validation.py so that
the processes which start no rank (the launcher, plan, compare) do not import Lightning."""
from __future__ import annotations

import time
from typing import Optional

import lightning.pytorch as pl
import torch

from shardlab.recipes.validation import ValidationSet, due, targets


class Validation(pl.Callback):
    """Runs after StepRecorder (recipes/metrics.py), at each step boundary where `due`, and hands it the loss: it keeps
    val_losses in its checkpointed state, logs them, and leaves the evaluation's time out of the step times."""

    def __init__(self, val: ValidationSet, recorder, every: Optional[int], micro_batch_size: int) -> None:
        self.val, self.recorder, self.every, self.micro_batch_size = val, recorder, every, micro_batch_size
        self._last = 0

    def on_train_start(self, trainer, pl_module) -> None:
        self._last = trainer.global_step  # a resumed run validated the steps before its checkpoint already

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if step <= self._last:
            return  # still accumulating
        self._last = step
        if not due(step, self.every, trainer.max_steps):
            return
        t0 = time.perf_counter()
        loss, count = evaluate(trainer, pl_module, self.val, self.micro_batch_size)
        self.recorder.add_validation(trainer, step, loss, count, time.perf_counter() - t0)


def evaluate(trainer, pl_module, val: ValidationSet, micro_batch_size: int) -> tuple[float, int]:
    """(mean loss over every target of the set, targets): eval mode, no gradients, one all-reduce."""
    model, device = pl_module.model, trainer.strategy.root_device
    was_training = model.training
    model.eval()
    total = torch.zeros(2, dtype=torch.float64)  # [summed loss, targets]
    try:
        with torch.no_grad(), trainer.precision_plugin.val_step_context():
            for ids, labels in val.micro_batches(micro_batch_size, trainer.world_size, trainer.global_rank):
                total[0] += pl_module.summed_loss(ids.to(device), labels.to(device)).double().cpu()
                total[1] += targets(labels)
    finally:
        model.train(was_training)
    total = trainer.strategy.reduce(total.to(device), reduce_op="sum").cpu()
    return float(total[0] / total[1].clamp(min=1)), int(total[1])
