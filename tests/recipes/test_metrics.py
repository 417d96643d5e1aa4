"""The step recorder (recipes/metrics.py): every optimizer step's loss, time and logged metrics, read at the step's end,
in order; a diverged step stops the run at its own end, with the step and the strategy named. Real Lightning fits of a
toy module on CPU, in this process."""
from __future__ import annotations

import math
from types import SimpleNamespace

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.loggers.logger import Logger

from shardlab.core.errors import RunFailed
from shardlab.recipes.metrics import StepRecorder


class Toy(pl.LightningModule):
    """A linear fit whose loss turns NaN at optimizer step `nan_at` (1-based), with what the recorder reads."""

    def __init__(self, nan_at: int = 0) -> None:
        super().__init__()
        self.layer, self.nan_at = torch.nn.Linear(4, 1), nan_at
        self.ctx = SimpleNamespace(micro_batch_size=2, grad_accum=1, world_size=1, precision="32-true")
        self.strategy = SimpleNamespace(name="ddp")

    def training_step(self, batch, batch_idx):
        loss = self.layer(batch.float()).square().mean()
        if self.global_step + 1 == self.nan_at:
            loss = loss * math.nan
        self.last_loss = loss.detach()
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self):
        return torch.utils.data.DataLoader(torch.randn(64, 4), batch_size=2)


class Seen(pl.Callback):
    """After the recorder: how many steps it had recorded at each step's end."""

    def __init__(self, recorder: StepRecorder) -> None:
        self.recorder, self.settled = recorder, []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.settled.append(len(self.recorder.losses))


class Metrics(Logger):
    name, version = "metrics", 0

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[int, dict]] = []

    def log_metrics(self, metrics, step=None) -> None:
        self.rows.append((step, dict(metrics)))

    def log_hyperparams(self, params, *args, **kwargs) -> None:
        pass


def _fit(recorder: StepRecorder, steps: int, nan_at: int = 0) -> tuple[Seen, Metrics]:
    seen, metrics = Seen(recorder), Metrics()
    pl.seed_everything(0, verbose=False)
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=steps, logger=metrics, enable_checkpointing=False,
                         enable_model_summary=False, enable_progress_bar=False, callbacks=[recorder, seen])
    trainer.fit(Toy(nan_at))
    return seen, metrics


def test_every_step_is_recorded_and_logged_at_its_end():
    recorder = StepRecorder()
    seen, metrics = _fit(recorder, steps=5)
    assert seen.settled == [1, 2, 3, 4, 5]
    assert len(recorder.step_s) == 5 and all(t > 0 for t in recorder.step_s)
    logged = [(step, m["loss"]) for step, m in metrics.rows if "loss" in m]
    assert logged == list(zip(range(1, 6), recorder.losses))
    assert all(m["tokens_per_s"] > 0 and m["lr"] == 0.01 for _, m in metrics.rows if "loss" in m)


def test_a_diverged_step_stops_the_run_at_its_end():
    recorder = StepRecorder()
    with pytest.raises(RunFailed, match="training diverged: loss is nan at step 3 under strategy 'ddp' with precision "
                                        "32-true; try 32-true or another strategy"):
        _fit(recorder, steps=6, nan_at=3)
    assert len(recorder.losses) == 3


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the allocator's history is CUDA's")
def test_allocation_history_names_what_is_live_at_the_peak(tmp_path):
    """record_allocations / dump_allocations (SHARDLAB_MEMORY_SNAPSHOT's and benchmarks/hf_peer.py's): the pickle
    benchmarks/memory_snapshot.py reads, with the baseline allocated before recording."""
    from benchmarks.memory_snapshot import live_at_peak
    from shardlab.recipes.metrics import dump_allocations, record_allocations

    before = torch.zeros(1 << 20, device="cuda")
    baseline = record_allocations()
    peak = torch.zeros(1 << 22, device="cuda")  # 16 MiB, live at the peak
    del peak
    dump_allocations(str(tmp_path / "s.pickle"), baseline)
    named = live_at_peak(tmp_path / "s.pickle")
    assert named["baseline_bytes"] >= before.numel() * 4 and named["peak_bytes"] - baseline >= 1 << 24
    assert not (tmp_path / "s.pickle.tmp").exists()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the caching allocator's statistics are CUDA's")
def test_the_requested_peak_is_what_the_tensors_asked_for():
    """peak_requested_bytes beside max_memory_allocated: odd sizes are rounded up to 512 bytes in the allocated peak,
    not in the requested one (results/2026-12-07c-peak-sites.md: 1.2-2.1 MB at llama-1b's peak)."""
    from shardlab.recipes.metrics import peak_memory_bytes, peak_requested_bytes

    device = torch.device("cuda")
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_stats(device)["requested_bytes.all.current"]
    odd = [torch.empty(1000 * 3 + 1, dtype=torch.uint8, device=device) for _ in range(100)]
    asked = peak_requested_bytes(device) - base
    assert asked >= 100 * 3001 and peak_requested_bytes(device) <= peak_memory_bytes(device)
    assert peak_requested_bytes(torch.device("cpu")) == 0
    del odd
