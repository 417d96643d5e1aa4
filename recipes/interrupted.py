"""Ctrl-C during `recipe run`: once the ranks have stopped, one line saying where the run got to and how to go on.

The step is the last one OUTPUT/logs/csv/metrics.csv records (rank 0 writes a row after every optimizer step);
the checkpoint is the newest finished step-NNNNNN (recipes/checkpoint.py). A checkpoint the interrupt cut short
is a `.step-NNNNNN.tmp` folder that no resume would take: it is removed, as the next write would remove it.
"""
from __future__ import annotations

import csv
import shutil
from pathlib import Path
from typing import Optional

from shardlab.core.config import RunConfig
from shardlab.core.errors import Interrupted


def stopped(cfg: RunConfig, started: float) -> Interrupted:
    """The ranks have stopped (none is writing): clean up after the run that started at `started` (time.time()),
    and say where it got to."""
    from shardlab.recipes import checkpoint

    output = Path(cfg.output)
    root = output / "checkpoints"
    if root.is_dir():
        for tmp in root.iterdir():
            if checkpoint.TMP_DIR.match(tmp.name):
                shutil.rmtree(tmp, ignore_errors=True)
    summary = output / "summary.json"
    if summary.is_file() and summary.stat().st_mtime >= started:
        return Interrupted(f"interrupted after the run finished: its results are in {summary}")
    step = last_step(output)
    at = f"interrupted at step {step} of {cfg.max_steps}" if step is not None else "interrupted"
    finished = checkpoint.step_dirs(root)
    if finished:
        return Interrupted(f"{at}; the newest checkpoint is {finished[-1]}; continue with the same command and --resume")
    if cfg.checkpoint_every:
        return Interrupted(f"{at}, before the first checkpoint (step {cfg.checkpoint_every}); nothing to resume: "
                           f"run the command again")
    return Interrupted(f"{at}; no checkpoints were written, nothing to resume: --checkpoint-every N writes them")


def last_step(output: Path) -> Optional[int]:
    """The last optimizer step in OUTPUT/logs/csv/metrics.csv (None without the file, e.g. --metrics none)."""
    path = output / "logs" / "csv" / "metrics.csv"
    try:
        with open(path, newline="") as f:
            steps = [int(float(row["step"])) for row in csv.DictReader(f) if (row.get("step") or "").strip()]
    except (OSError, ValueError, KeyError, csv.Error):
        return None
    return max(steps) if steps else None
