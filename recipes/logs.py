"""OUTPUT/logs: per-step metrics as CSV and TensorBoard, continued (never truncated) by a resumed run."""
from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Optional

from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment
from lightning.pytorch.utilities import rank_zero_only


class _ContinuedMetrics(ExperimentWriter):
    """metrics.csv continued: its first save keeps the rows before this run's first step, the rest go."""

    def __init__(self, log_dir: str) -> None:
        super().__init__(log_dir)
        self._joined = False

    def _check_log_dir_exists(self) -> None:  # Lightning deletes metrics.csv here, before any step is logged
        pass

    def save(self) -> None:
        if self.metrics and not self._joined:
            self._join(min(int(m["step"]) for m in self.metrics))
        super().save()

    def _join(self, first: int) -> None:
        """Rewrite metrics.csv (atomically) with the earlier rows of the steps before `first`, under the header
        of those and this run's columns; super().save() then appends this run's rows."""
        kept: list[dict[str, str]] = []
        if os.path.isfile(self.metrics_file_path):
            with open(self.metrics_file_path, newline="") as f:
                kept = [row for row in csv.DictReader(f) if _step(row) is not None and _step(row) < first]
        self._record_new_keys()
        self.metrics_keys = sorted(set(self.metrics_keys).union(*(row.keys() for row in kept)) - {None})
        tmp = self.metrics_file_path + ".tmp"
        with open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=self.metrics_keys, extrasaction="ignore")  # a ragged line's extras
            writer.writeheader()
            writer.writerows(kept)
        os.replace(tmp, self.metrics_file_path)
        self._joined = True


def _step(row: dict[str, str]) -> Optional[int]:
    try:
        return int(float(row.get("step") or ""))
    except ValueError:
        return None


class ContinuedCSVLogger(CSVLogger):
    """OUTPUT/logs/csv/metrics.csv, written every step (a killed run's file holds every step up to its last
    checkpoint) and continued by the next run (_ContinuedMetrics)."""

    def __init__(self, output: Path) -> None:
        super().__init__(output, name="logs", version="csv", flush_logs_every_n_steps=1)

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _ContinuedMetrics(log_dir=self.log_dir)
        return self._experiment


class ContinuedTensorBoardLogger(TensorBoardLogger):
    """OUTPUT/logs/tensorboard: a new event file per run beside the earlier ones. Its first logged step s
    starts with the event TensorBoard's own purge_step writes (a session START at s): TensorBoard then hides
    the steps >= s of the earlier files, which an interrupted run logged past its checkpoint. (SummaryWriter's
    purge_step cannot be used: Lightning opens the writer before the checkpoint is loaded, so s is not known.)"""

    def __init__(self, output: Path) -> None:
        super().__init__(output, name="logs", version="tensorboard", default_hp_metric=False)
        self._started = False

    @rank_zero_only
    def log_metrics(self, metrics, step: Optional[int] = None) -> None:
        if not self._started and step is not None:
            from tensorboard.compat.proto.event_pb2 import Event, SessionLog

            self.experiment._get_file_writer().add_event(Event(step=step, session_log=SessionLog(status=SessionLog.START)))
            self._started = True
        super().log_metrics(metrics, step)
