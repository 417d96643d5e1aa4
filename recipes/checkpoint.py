"""Periodic checkpoints in each backend's native (sharded) form, and resuming from them.

Layout: OUTPUT/checkpoints/step-NNNNNN/ holds `state` (what Lightning's `trainer.save_checkpoint` writes
for the strategy: one file for DDP, DeepSpeed's per-rank shards, FSDP2's distributed checkpoint),
`rng-rankR.pt` (each rank's Python, NumPy and torch RNG states) and `meta.json` (what the run was, to
refuse a resume that cannot continue it, and the manifest: every other file's size and checksum).
A checkpoint is written under `.step-NNNNNN.tmp`, meta.json last, and renamed when every rank has
finished; a write that was killed leaves only a dot-folder, which `latest` never picks. A resume
checks the manifest in the launching process, before any rank starts, so a truncated or missing shard
is one line naming the newest intact checkpoint. The last `keep` checkpoints are kept.

Lightning's checkpoint carries the model, optimizer, LR scheduler, precision plugin (GradScaler) or
DeepSpeed loss scaler, loop progress, callback states (StepRecorder: the losses so far) and the
datamodule's data position (recipes/datamodule.py LlamaData).

A run continues its metrics files under OUTPUT/logs (recipes/logs.py):
the steps before its first logged step are kept, the later ones the run writes again are replaced,
and nothing is deleted before the run has logged a step.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import time
import zipfile
import zlib
from pathlib import Path
from typing import Any, Optional

import lightning.pytorch as pl
import torch

from shardlab.core.errors import UserError

STEP_DIR = re.compile(r"^step-(\d{6,})$")
TMP_DIR = re.compile(r"^\.step-(\d{6,})\.tmp$")
# Run fields a resume must keep: the numerics and the exact sequences of each optimizer step. The global batch
# (micro-batch x accumulation x world size) must match too; how it is split may change (recipes/data.py), and
# another strategy or world size resumes from the checkpoint's portable copy (recipes/portable.py).
# --val-split decides which blocks are trained on; --val-data changes nothing that is trained, and may change.
MUST_MATCH = ("precision", "seq_len", "seed", "data", "data_field", "data_format", "long_examples", "val_split")
WRITTEN_BEFORE = {"data_field": "text", "data_format": "text", "long_examples": "truncate",
                  "val_split": None}  # checkpoints without the field
# Whose file it is, for the message: rng-rank1.pt, FSDP2's __1_0.distcp, DeepSpeed's (bf16_)zero_pp_rank_1_...
RANK_FILE = re.compile(r"^rng-rank(?P<rng>\d+)\.pt$|^__(?P<dcp>\d+)_\d+\.distcp$|^(?:bf16_)?zero_pp_rank_(?P<zero>\d+)_")
# The manifest fingerprints each file by its size and the CRC32 of its first and last MiB, not by a
# full hash: rank 0 would otherwise read back every byte of every shard (about 1 TB for a 70B model's
# weights and Adam state, 16 bytes per parameter: minutes on a shared filesystem) at every checkpoint. The size catches what goes wrong
# in practice (a killed copy, a full disk, a shard from another write); the ends hold torch's zip
# directory and DCP's first records. Not caught: bytes flipped in the middle of a file.
EDGE = 1 << 20


def step_dirs(root: Path) -> list[Path]:
    """Finished checkpoints under root, oldest first (temporary dot-folders are never listed)."""
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := STEP_DIR.match(p.name)) and p.is_dir()]
    return [p for _, p in sorted(found)]


def run_identity(cfg, strategy: str, world_size: int, model_cfg, data_format: str,
                 layout: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """What meta.json records and a resume compares (`model` only names it in messages; the shape decides).
    data_format: the data's format as found (what --data-format auto resolved to); --long-examples only changes
    the sequences of the formats other than text. layout: Strategy.checkpoint_layout, what the backend's own form
    depends on beyond the strategy and world size."""
    shape = {k: getattr(model_cfg, k) for k in ("hidden_size", "intermediate_size", "num_hidden_layers",
                                                "num_attention_heads", "num_key_value_heads", "vocab_size")}
    return {"strategy": strategy, "world_size": world_size, "precision": cfg.precision,
            "micro_batch_size": cfg.micro_batch_size, "grad_accum": cfg.grad_accum, "seq_len": cfg.seq_len,
            "seed": cfg.seed, "data": cfg.data, "data_field": cfg.data_field, "data_format": data_format,
            "long_examples": cfg.long_examples if data_format != "text" else "truncate", "val_split": cfg.val_split,
            "model": str(cfg.model), "model_shape": shape, "layout": layout or {}}


def fingerprint(file: Path) -> dict[str, Any]:
    """{size, crc32}: the CRC32 of the whole file up to 2 MiB, else of its first and last MiB (see EDGE)."""
    size = file.stat().st_size
    with open(file, "rb") as f:
        if size <= 2 * EDGE:
            crc = zlib.crc32(f.read())
        else:
            crc = zlib.crc32(f.read(EDGE))
            f.seek(size - EDGE)
            crc = zlib.crc32(f.read(EDGE), crc)
    return {"size": size, "crc32": f"{crc:08x}"}


def manifest(folder: Path) -> dict[str, dict[str, Any]]:
    """Every file under folder but meta.json, by POSIX path relative to it."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != "meta.json")
    return {p.relative_to(folder).as_posix(): fingerprint(p) for p in files}


def problem(path: Path) -> Optional[str]:
    """Why the checkpoint folder cannot be resumed from, or None when it is intact.

    meta.json without "files" was written before manifests: intact when its files are there and readable.
    """
    if TMP_DIR.match(path.name):
        return "a temporary folder: the checkpoint is still being written, or its writer was killed"
    try:
        meta = json.loads((path / "meta.json").read_text())
        world_size, files = int(meta["world_size"]), meta.get("files")
        int(meta["step"])
        if files is not None:
            files = {str(rel): {"size": int(f["size"]), "crc32": str(f["crc32"])} for rel, f in files.items()}
    except FileNotFoundError:
        return "no meta.json: its writer was killed or the copy is incomplete"
    except (ValueError, KeyError, TypeError, AttributeError):
        return "meta.json is corrupt"
    if not (path / "state").exists():
        return "it has no state"
    if files is None:
        wanted = [f"rng-rank{r}.pt" for r in range(world_size)]
    else:
        wanted = list(files)
    for rel in wanted:
        if not (path / rel).is_file():
            return f"{_whose(rel)} is missing"
        if files is not None:
            have, was = fingerprint(path / rel), files[rel]
            if have["size"] < was["size"]:
                return f"{_whose(rel)} is truncated: {have['size']} of {was['size']} bytes"
            if have["size"] != was["size"]:
                return f"{_whose(rel)} has {have['size']} bytes, {was['size']} were written"
            if have != was:
                return f"{_whose(rel)} changed after it was written (its checksum differs)"
    torch_files = [p for p in [path / "state", *path.rglob("*.pt")] if p.is_file()]
    for p in torch_files:  # a zip's directory is at its end: a cheap read, and what torch.load fails on first
        try:
            with zipfile.ZipFile(p):
                pass
        except (zipfile.BadZipFile, OSError):
            return f"{_whose(p.relative_to(path).as_posix())} is not a readable torch file"
    return None


def _whose(rel: str) -> str:
    m = RANK_FILE.match(Path(rel).name)
    if not m:
        return rel
    if m.group("rng"):
        return f"rank {int(m.group('rng'))}'s RNG state {rel}"
    return f"rank {int(m.group('dcp') or m.group('zero'))}'s shard {rel}"


def newest_intact(root: Path, other_than: Optional[Path] = None) -> tuple[Optional[Path], list[tuple[Path, str]]]:
    """The newest intact checkpoint under root, and the newer ones passed over with why."""
    passed = []
    for p in reversed(step_dirs(root)):
        if other_than is not None and p.resolve() == other_than.resolve():
            continue
        why = problem(p)
        if why is None:
            return p, passed
        passed.append((p, why))
    return None, passed


def resolve_resume(resume: str, output: Path, flag: str = "--resume") -> tuple[Path, Optional[str]]:
    """`--resume` (latest under OUTPUT/checkpoints) or `--resume PATH` -> (an intact checkpoint folder,
    a warning when newer broken ones were passed over). Nothing is written. `flag` names the argument in messages."""
    if resume == "latest":
        root = output / "checkpoints"
        if not step_dirs(root):
            raise UserError(f"{flag}: no finished checkpoint under {root}; "
                            f"give --resume PATH or start without --resume")
        return _newest(root, flag)
    path = Path(resume)
    if path.is_dir() and not (path / "meta.json").exists() and step_dirs(path):  # a checkpoints/ folder
        return _newest(path, flag)
    if not path.is_dir():
        raise UserError(f"{flag} {resume}: no such checkpoint folder; give OUTPUT/checkpoints/step-NNNNNN")
    if not (path / "meta.json").exists() and not (STEP_DIR.match(path.name) or TMP_DIR.match(path.name)):
        raise UserError(f"{flag} {path}: not a shardlab checkpoint (no meta.json); give OUTPUT/checkpoints/step-NNNNNN")
    why = problem(path)
    if why:
        good, _ = newest_intact(path.parent, other_than=path)
        instead = (f"the newest intact checkpoint is {good.name}: use {flag} {good}" if good else
                   f"no intact checkpoint under {path.parent}: start without --resume")
        raise UserError(f"{flag} {path}: incomplete or corrupt ({why}); {instead}")
    return path, None


def _newest(root: Path, flag: str = "--resume") -> tuple[Path, Optional[str]]:
    good, passed = newest_intact(root)
    if good is None:
        newest, why = passed[0]
        raise UserError(f"{flag}: no intact checkpoint under {root} (the newest, {newest.name}, is incomplete "
                        f"or corrupt: {why}); start without --resume")
    warning = None
    if passed:
        names = ", ".join(f"{p.name} ({why})" for p, why in passed)
        warning = f"{flag}: passed over incomplete or corrupt {names}; resuming from {good.name}"
    return good, warning


def check_resume(path: Path, identity: dict[str, Any], max_steps: int) -> bool:
    """meta.json against this run: every difference that would not continue the same run is an error.
    `path` is intact: what resolve_resume returned. True: the run resumes from the portable copy (another
    strategy or world size than the checkpoint's)."""
    meta = json.loads((path / "meta.json").read_text())
    step = int(meta["step"])
    if meta.get("model_shape") != identity["model_shape"]:
        use = f"use --model {meta['model']}" if meta.get("model") else "use the same --model"
        raise UserError(f"--resume {path}: written for a model of another shape ({_shape(meta.get('model_shape'))}) "
                        f"than --model {identity['model']} ({_shape(identity['model_shape'])}); {use}")
    for field in MUST_MATCH:
        written = meta.get(field, WRITTEN_BEFORE.get(field))
        if written != identity[field]:
            why = " (the numerics)" if field == "precision" else " (the sequences of each step depend on it)"
            flag = f"--{field.replace('_', '-')}"
            fix = f"leave {flag} out" if written is None else f"use {flag} {written}"
            raise UserError(f"--resume {path}: the checkpoint was written with {field} {written!r}{why}, "
                            f"this run has {identity[field]!r}; {fix}")
    batch = lambda m: int(m["micro_batch_size"]) * int(m["grad_accum"]) * int(m["world_size"])  # noqa: E731
    if batch(meta) != batch(identity):
        raise UserError(f"--resume {path}: the checkpoint's global batch is {batch(meta)} sequences per step "
                        f"({_split(meta)}), this run's {batch(identity)} ({_split(identity)}); "
                        f"{_same_batch(batch(meta), identity)}")
    if step >= max_steps:
        raise UserError(f"--resume {path}: the checkpoint is at step {step}, --max-steps is {max_steps}; "
                        f"raise --max-steps to train further")
    elsewhere = (meta["strategy"], meta["world_size"]) != (identity["strategy"], identity["world_size"])
    # the same strategy and world size with another layout of the backend's own form (Strategy.checkpoint_layout) reads
    # the portable copy, which loads at any layout; so does a checkpoint from before layouts were recorded (ZeRO-3 then
    # ran in one sub-group) where this run has one
    layout, written = identity.get("layout") or {}, meta.get("layout")
    relaid = not elsewhere and (written != layout if written is not None else bool(layout))
    portable = (path / "portable" / "index.json").is_file()
    if relaid and not portable:
        written = ", ".join(f"{k} {v}" for k, v in (written or {}).items()) or "no recorded layout"
        now = ", ".join(f"{k} {v}" for k, v in layout.items()) or "no layout"
        raise UserError(f"--resume {path}: written by {meta['strategy']} with {written} and without a portable copy "
                        f"(--no-portable-checkpoints); this run has {now}, which cannot load the backend's own form; "
                        f"resume with the settings that wrote it (its --experiments and --deepspeed-config)")
    if relaid:
        return True
    if elsewhere and not portable:
        raise UserError(f"--resume {path}: written by {meta['strategy']} on {meta['world_size']} rank(s) without a "
                        f"portable copy (--no-portable-checkpoints), so only that strategy and world size can "
                        f"resume it; use --strategy {meta['strategy']} with {meta['world_size']} rank(s)")
    return elsewhere


def _split(m: dict[str, Any]) -> str:
    return f"micro-batch {m['micro_batch_size']} x accumulation {m['grad_accum']} x {m['world_size']} rank(s)"


def _same_batch(batch: int, run: dict[str, Any]) -> str:
    """The flag that gives this run the checkpoint's global batch, or what cannot."""
    per_step = run["micro_batch_size"] * run["world_size"]
    if batch % per_step == 0:
        return f"use --grad-accum {batch // per_step}"
    if batch % run["world_size"] == 0:
        per_rank = batch // run["world_size"]
        return f"use --micro-batch-size {per_rank} --grad-accum 1 (or any micro-batch x accumulation = {per_rank})"
    return f"{batch} sequences do not divide over {run['world_size']} ranks: use a world size that divides {batch}"


def _shape(s: Optional[dict]) -> str:
    return "unknown" if not s else f"hidden {s['hidden_size']}, {s['num_hidden_layers']} layers, vocab {s['vocab_size']}"


class PeriodicCheckpoint(pl.Callback):
    """Every `every` optimizer steps: write step-NNNNNN atomically, keep the last `keep`. With `portable`, each
    checkpoint also gets its portable copy (recipes/portable.py) from `model_folder`'s config and tokenizer."""

    def __init__(self, root: Path, every: int, keep: int, identity: dict[str, Any], portable: bool = False,
                 model_folder: str = "") -> None:
        self.root, self.every, self.keep, self.identity = root, every, keep, identity
        self.portable, self.model_folder = portable, model_folder
        self._last = -1
        self._train_state_to: Optional[Path] = None

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
        if self._train_state_to is not None and trainer.global_rank == 0:  # Lightning's state, without tensors
            from shardlab.recipes import portable

            torch.save(portable.train_state(checkpoint), self._train_state_to / "train.pt")

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
        if self.portable:
            self._train_state_to = tmp / "portable"
            if trainer.global_rank == 0:
                self._train_state_to.mkdir()
        t0 = time.perf_counter()
        try:
            trainer.save_checkpoint(tmp / "state", weights_only=False)  # collective: each backend writes its own form
        finally:
            self._train_state_to = None
        seconds = {"native_s": round(time.perf_counter() - t0, 2)}
        if self.portable:  # collective: one parameter at a time
            from shardlab.recipes import portable

            t0 = time.perf_counter()

            module = trainer.lightning_module
            portable.write(tmp / "portable", module.strategy, module.model, trainer.optimizers[0],
                           trainer.global_rank == 0, self.model_folder)
            seconds["portable_s"] = round(time.perf_counter() - t0, 2)
        torch.save(_rng_states(), tmp / f"rng-rank{trainer.global_rank}.pt")
        strategy.barrier("shardlab-ckpt-written")
        if trainer.global_rank == 0:
            # last, with the manifest of everything the ranks wrote: no meta.json, no checkpoint
            meta = {**self.identity, "step": step, "write_seconds": seconds, "files": manifest(tmp)}
            (tmp / "meta.json").write_text(json.dumps(meta, indent=2))
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
