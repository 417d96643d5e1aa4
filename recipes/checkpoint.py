"""Periodic checkpoints in each backend's native (sharded) form, and resuming from them.

Layout: OUTPUT/checkpoints/step-NNNNNN/ holds `state` (what Lightning's `trainer.save_checkpoint` writes
for the strategy: one file for DDP, DeepSpeed's per-rank shards, FSDP2's distributed checkpoint),
`rng-rankR.pt` (each rank's Python, NumPy and torch RNG states) and `meta.json` (what the run was, to
refuse a resume that cannot continue it). A checkpoint is written under `.step-NNNNNN.tmp` and renamed
when every rank has finished, so a folder named `step-*` is always complete; a write that was killed
leaves only a dot-folder, which `latest` never picks. The last `keep` checkpoints are kept.

Lightning's checkpoint carries the model, optimizer, LR scheduler, precision plugin (GradScaler) or
DeepSpeed loss scaler, loop progress, callback states (StepRecorder: the losses so far) and the
datamodule's data position (LlamaData).
"""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, Optional

import lightning.pytorch as pl
import torch

from shardlab.core.errors import UserError

STEP_DIR = re.compile(r"^step-(\d{6,})$")
# Run fields a resume must keep: the model, how it is sharded, and the exact batch sequence.
MUST_MATCH = ("strategy", "world_size", "precision", "micro_batch_size", "grad_accum", "seq_len", "seed", "data")


def step_dirs(root: Path) -> list[Path]:
    """Finished checkpoints under root, oldest first (temporary dot-folders are never listed)."""
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := STEP_DIR.match(p.name)) and p.is_dir()]
    return [p for _, p in sorted(found)]


def run_identity(cfg, strategy: str, world_size: int, model_cfg) -> dict[str, Any]:
    """What meta.json records and a resume compares."""
    shape = {k: getattr(model_cfg, k) for k in ("hidden_size", "intermediate_size", "num_hidden_layers",
                                                "num_attention_heads", "num_key_value_heads", "vocab_size")}
    return {"strategy": strategy, "world_size": world_size, "precision": cfg.precision,
            "micro_batch_size": cfg.micro_batch_size, "grad_accum": cfg.grad_accum, "seq_len": cfg.seq_len,
            "seed": cfg.seed, "data": cfg.data, "model_shape": shape}


def resolve_resume(resume: str, output: Path) -> Path:
    """`--resume` (latest under OUTPUT/checkpoints) or `--resume PATH` -> a finished checkpoint folder."""
    if resume == "latest":
        found = step_dirs(output / "checkpoints")
        if not found:
            raise UserError(f"--resume: no finished checkpoint under {output / 'checkpoints'}; "
                            f"give --resume PATH or start without --resume")
        return found[-1]
    path = Path(resume)
    if path.is_dir() and not (path / "meta.json").exists() and step_dirs(path):  # a checkpoints/ folder
        path = step_dirs(path)[-1]
    if not path.is_dir():
        raise UserError(f"--resume {resume}: no such checkpoint folder; give OUTPUT/checkpoints/step-NNNNNN")
    return path


def check_resume(path: Path, identity: dict[str, Any], max_steps: int) -> dict[str, Any]:
    """meta.json against this run: every difference that would not continue the same run is an error."""
    try:
        meta = json.loads((path / "meta.json").read_text())
        step = int(meta["step"])
    except FileNotFoundError:
        raise UserError(f"--resume {path}: not a shardlab checkpoint (no meta.json); give OUTPUT/checkpoints/step-NNNNNN") from None
    except (ValueError, KeyError, TypeError):
        raise UserError(f"--resume {path}: meta.json is corrupt; resume from an earlier checkpoint") from None
    if not (path / "state").exists():
        raise UserError(f"--resume {path}: the checkpoint has no state (incomplete copy?); resume from another one")
    if meta.get("model_shape") != identity["model_shape"]:
        raise UserError(f"--resume {path}: written for a model of another shape ({_shape(meta.get('model_shape'))}) "
                        f"than --model ({_shape(identity['model_shape'])}); use the same --model")
    for field in MUST_MATCH:
        if meta.get(field) != identity[field]:
            flag = "--devices/--num-nodes" if field == "world_size" else "--" + field.replace("_", "-")
            why = (" (its shards are in that backend's format)" if field == "strategy" else
                   " (the shards are split for it)" if field == "world_size" else " (the data position depends on it)")
            raise UserError(f"--resume {path}: the checkpoint was written with {field} {meta.get(field)!r}{why}, "
                            f"this run has {identity[field]!r}; use {flag} {meta.get(field)}")
    if step >= max_steps:
        raise UserError(f"--resume {path}: the checkpoint is at step {step}, --max-steps is {max_steps}; "
                        f"raise --max-steps to train further")
    return meta


def _shape(s: Optional[dict]) -> str:
    return "unknown" if not s else f"hidden {s['hidden_size']}, {s['num_hidden_layers']} layers, vocab {s['vocab_size']}"


class PeriodicCheckpoint(pl.Callback):
    """Every `every` optimizer steps: write step-NNNNNN atomically, keep the last `keep`."""

    def __init__(self, root: Path, every: int, keep: int, identity: dict[str, Any]) -> None:
        self.root, self.every, self.keep, self.identity = root, every, keep, identity
        self._last = -1

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if step == 0 or step == self._last or step % self.every:  # once per optimizer step, after it
            return
        self._last = step
        self.save(trainer, step)

    def save(self, trainer: pl.Trainer, step: int) -> None:
        final = self.root / f"step-{step:06d}"
        tmp = self.root / f".step-{step:06d}.tmp"
        strategy = trainer.strategy
        if trainer.global_rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)  # left by a write that was killed
            tmp.mkdir(parents=True)
        strategy.barrier("shardlab-ckpt-start")
        trainer.save_checkpoint(tmp / "state")  # collective: each backend writes its own form
        torch.save(_rng_states(), tmp / f"rng-rank{trainer.global_rank}.pt")
        strategy.barrier("shardlab-ckpt-written")
        if trainer.global_rank == 0:
            (tmp / "meta.json").write_text(json.dumps({**self.identity, "step": step}, indent=2))
            if final.exists():
                shutil.rmtree(final)
            os.rename(tmp, final)
            for old in step_dirs(self.root)[: -self.keep]:
                shutil.rmtree(old, ignore_errors=True)
        strategy.barrier("shardlab-ckpt-done")


class RestoreRNG(pl.Callback):
    """On resume: each rank's RNG states as they were when the checkpoint was written."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def on_train_start(self, trainer, pl_module) -> None:
        from lightning.fabric.utilities.seed import _set_rng_states

        file = self.path / f"rng-rank{trainer.global_rank}.pt"
        if file.exists():
            _set_rng_states(torch.load(file, weights_only=False))


def _rng_states() -> dict[str, Any]:
    from lightning.fabric.utilities.seed import _collect_rng_states

    return _collect_rng_states(include_cuda=torch.cuda.is_available())
