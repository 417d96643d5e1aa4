"""Per-step measurements every run reports: global mean loss, step time, peak memory per rank."""
from __future__ import annotations

import math
import resource
import statistics
import time
from typing import Optional

import lightning.pytorch as pl
import torch

from shardlab.core.errors import RunFailed


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_memory_bytes(device: torch.device) -> int:
    """GPU: the caching allocator's peak; CPU: the process's peak resident set."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def peak_requested_bytes(device: torch.device) -> int:
    """GPU: the peak of the bytes the tensors asked for (the allocator's requested_bytes), 0 on CPU. The allocated peak
    (max_memory_allocated) also counts each block's rounding to 512 bytes and, without expandable segments, the tail of
    a cached block handed out whole (a tail under 1 MiB is not split off): 1.2-2.1 MB at llama-1b's peak on one H100
    (results/2026-12-07c-peak-sites.md), different between two programs whose tensors are the same. A freed block
    still in use by another stream (record_stream) stays in the requested bytes, not in the allocated ones, until
    that stream is done."""
    if device.type == "cuda":
        return int(torch.cuda.memory_stats(device).get("requested_bytes.all.peak", 0))
    return 0


class StepRecorder(pl.Callback):
    """Records, for every optimizer step, the loss averaged over ranks and micro-batches, and its wall time."""

    def __init__(self) -> None:
        self.losses: list[float] = []
        self.step_s: list[float] = []
        self.peaks: list[int] = []
        self.cpu_peaks: list[int] = []
        self.requested_peaks: Optional[list[int]] = None
        """GPU: each rank's peak of the bytes its tensors asked for (peak_requested_bytes); None on CPU."""
        self.val_losses: list[dict] = []
        """{step, loss, tokens}: the validation loss after those steps (recipes/validation.py), over that many targets."""
        self._micro: list[torch.Tensor] = []
        self._t0 = 0.0
        self._lr = 0.0

    def state_dict(self) -> dict:  # in every checkpoint: a resumed run reports every step's loss
        return {"losses": list(self.losses), "step_s": list(self.step_s), "val_losses": list(self.val_losses)}

    def load_state_dict(self, state: dict) -> None:
        self.losses, self.step_s = list(state["losses"]), list(state["step_s"])
        self.val_losses = list(state.get("val_losses", []))  # none in checkpoints written before validation

    def add_validation(self, trainer, step: int, loss: float, tokens: int, seconds: float) -> None:
        """A validation loss after optimizer step `step`: kept, logged as val_loss, its time left out of step times."""
        self.val_losses.append({"step": step, "loss": loss, "tokens": tokens})
        self._t0 += seconds  # the next step's time starts when training resumes
        for logger in trainer.loggers:
            logger.log_metrics({"val_loss": loss}, step=step)

    def on_train_start(self, trainer, pl_module) -> None:
        if pl_module.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(pl_module.device)
        _sync(pl_module.device)
        self._t0 = time.perf_counter()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if not self._micro:  # first micro-batch of an optimizer step: the lr this step uses
            self._lr = trainer.optimizers[0].param_groups[0]["lr"]

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._micro.append(pl_module.last_loss.float())
        if trainer.global_step <= len(self.losses):
            return  # still accumulating
        local = torch.stack(self._micro).mean()
        self._micro = []
        loss = trainer.strategy.reduce(local.to(trainer.strategy.root_device), reduce_op="mean")
        _sync(pl_module.device)
        now = time.perf_counter()
        self.step_s.append(now - self._t0)
        self._t0 = now
        self.losses.append(float(loss))
        ids = batch["input_ids"] if isinstance(batch, dict) else batch  # chat and instruction data: a dict
        tokens = pl_module.ctx.micro_batch_size * ids.shape[-1] * pl_module.ctx.grad_accum * pl_module.ctx.world_size
        metrics = {"loss": self.losses[-1], "lr": self._lr,
                   "step_s": self.step_s[-1], "tokens_per_s": tokens / self.step_s[-1]}
        for logger in trainer.loggers:  # rank-zero-only loggers: CSV and TensorBoard under OUTPUT/logs
            logger.log_metrics(metrics, step=len(self.losses))
        if not math.isfinite(self.losses[-1]):  # every rank sees the same reduced loss: all stop together
            raise RunFailed(
                f"training diverged: loss is {self.losses[-1]} at step {len(self.losses)} under strategy "
                f"'{pl_module.strategy.name}' with precision {pl_module.ctx.precision}; try 32-true or another strategy"
            )

    def on_train_end(self, trainer, pl_module) -> None:
        rss = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
        both = torch.tensor([peak_memory_bytes(pl_module.device), rss, peak_requested_bytes(pl_module.device)],
                            device=trainer.strategy.root_device)
        gathered = trainer.strategy.all_gather(both).reshape(-1, 3).tolist()  # one collective: [rank][peak, rss, asked]
        self.peaks, self.cpu_peaks = [int(g[0]) for g in gathered], [int(g[1]) for g in gathered]
        self.requested_peaks = [int(g[2]) for g in gathered] if pl_module.device.type == "cuda" else None

    def median_step_s(self) -> float:
        """Median optimizer-step time after warm-up: 5 steps (as the raw-Lightning anchor), fewer on short runs."""
        warmup = min(5, len(self.step_s) // 2)
        return statistics.median(self.step_s[warmup:])


def record_allocations(device=None) -> int:
    """Start the allocator's history on a GPU; returns the bytes allocated before it (the snapshot's baseline)."""
    baseline = torch.cuda.memory_allocated(device)
    torch.cuda.memory._record_memory_history(context="alloc", stacks="python", max_entries=2_000_000)
    return baseline


def dump_allocations(path: str, baseline: int) -> None:
    """The history since record_allocations to `path` (a pickle, its baseline under "shardlab_baseline_bytes"; written
    whole, then renamed), and the recording stopped."""
    import os
    import pickle

    snapshot = torch.cuda.memory._snapshot()
    snapshot["shardlab_baseline_bytes"] = baseline
    with open(f"{path}.tmp", "wb") as f:
        pickle.dump(snapshot, f)
    os.replace(f"{path}.tmp", path)
    torch.cuda.memory._record_memory_history(enabled=None)


class MemorySnapshot(pl.Callback):
    """Global rank 0 on a GPU: the allocator's history from the start of training, dumped after `steps` optimizer
    steps to `path` (a pickle that https://pytorch.org/memory_viz reads; benchmarks/memory_snapshot.py names the
    tensors live at the peak). Set by SHARDLAB_MEMORY_SNAPSHOT=PATH; a diagnostic, off by default."""

    def __init__(self, path: str, steps: int = 2) -> None:
        self.path, self.steps, self.baseline, self.done = path, steps, 0, False

    def on_train_start(self, trainer, pl_module) -> None:
        if trainer.global_rank == 0 and pl_module.device.type == "cuda":
            self.baseline = record_allocations(pl_module.device)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_rank == 0 and pl_module.device.type == "cuda" and not self.done and trainer.global_step >= self.steps:
            dump_allocations(self.path, self.baseline)
            self.done = True
