"""The data side of the recipe as Lightning sees it in each rank: LlamaData hands each rank its micro-batches
(recipes/data.py GlobalBatchSampler) and keeps the data position in the checkpoint. Apart from recipes/data.py so
that the processes which start no rank (the launcher, plan, compare) do not import Lightning (~3 s each)."""
from __future__ import annotations

import warnings
from typing import Optional

import lightning.pytorch as pl
from torch.utils.data import DataLoader

from shardlab.core.errors import UserError
from shardlab.recipes.data import Array, Blocks, GlobalBatchSampler


# LlamaData carries the data position in its own state (below), which Lightning does not look at
# when it warns that a mid-epoch resume restarts the epoch: here it does not.
warnings.filterwarnings("ignore", message="You're resuming from a checkpoint that ended before the epoch ended")
# Nor does its logging interval matter (recipes/metrics.py logs every optimizer step itself): a short epoch (a small
# chat data set) is no reason to warn.
warnings.filterwarnings("ignore", message=r"The number of training batches \(\d+\) is smaller than the logging interval")


class LlamaData(pl.LightningDataModule):
    """Same seed and global batch -> the same sequences in every optimizer step, for every strategy and every
    world size x micro-batch x grad-accum split (GlobalBatchSampler says which rank trains on which).

    Its state in a checkpoint is the data position in optimizer steps (and the global batch they are counted
    in), so a resumed run continues with the next global batch instead of restarting the epoch (Lightning
    alone would restart it), also under another split of the same global batch."""

    def __init__(self, blocks: Array, micro_batch_size: int, seed: int, grad_accum: int = 1,
                 labels: Optional[Array] = None) -> None:
        super().__init__()
        self.dataset, self.micro_batch_size, self.seed = Blocks(blocks, labels), micro_batch_size, seed
        self.grad_accum = grad_accum
        self.steps_done = 0  # optimizer steps trained before this fit: set by load_state_dict on resume
        self._resumed_accum: Optional[int] = None  # the --grad-accum the checkpoint was written with

    def global_batch(self) -> int:
        return self.micro_batch_size * self.grad_accum * self.trainer.world_size

    def train_dataloader(self) -> DataLoader:
        # Lightning has restored its loop state by now (it calls this after loading the checkpoint)
        if self._resumed_accum not in (None, self.grad_accum):
            self._recount_micro_batches(self._resumed_accum)
        sampler = GlobalBatchSampler(len(self.dataset), self.micro_batch_size, self.grad_accum, self.trainer.world_size,
                                     self.trainer.global_rank, self.seed, steps_done=self.steps_done,
                                     labels=self.dataset.labels)
        return DataLoader(self.dataset, batch_size=self.micro_batch_size, sampler=sampler, drop_last=True)

    def state_dict(self) -> dict:
        return {"optimizer_steps": self.trainer.global_step, "global_batch": self.global_batch(),
                "grad_accum": self.grad_accum, "blocks": len(self.dataset)}

    def load_state_dict(self, state: dict) -> None:
        if "optimizer_steps" not in state:  # {"epoch", "batches_done"}: a position in the per-rank order before it
            raise UserError("--resume: the checkpoint was written by a shardlab that ordered data per rank "
                            "(DistributedSampler); this one orders it by global batch and cannot continue that "
                            "order; finish the run with the shardlab that started it, or start without --resume")
        if state["blocks"] != len(self.dataset):
            raise UserError(f"--resume: the checkpoint was trained on {state['blocks']} blocks, --data now gives "
                            f"{len(self.dataset)}; resume with the data it was trained on")
        if state["global_batch"] != self.global_batch():
            raise UserError(f"--resume: the checkpoint's data position counts global batches of {state['global_batch']} "
                            f"sequences, this run's are {self.global_batch()} (--micro-batch-size x --grad-accum x "
                            f"world size); keep their product at {state['global_batch']}")
        self.steps_done, self._resumed_accum = state["optimizer_steps"], state["grad_accum"]

    def _recount_micro_batches(self, old_accum: int) -> None:
        """Lightning's restored batch counters count the checkpoint's micro-batches; it steps the optimizer
        when the count is a multiple of --grad-accum and ends the epoch at len(dataloader) micro-batches.
        Under another --grad-accum they are recounted: the same optimizer steps, in this run's micro-batches.
        (Checkpoints are written right after an optimizer step, so the counts are whole steps.)"""
        progress = self.trainer.fit_loop.epoch_loop.batch_progress
        for counters in (progress.current, progress.total):  # this epoch's, and the run's
            shift = counters.processed // old_accum * (self.grad_accum - old_accum)
            for name in ("ready", "started", "processed", "completed"):
                setattr(counters, name, getattr(counters, name) + shift)
