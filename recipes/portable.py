"""A checkpoint's portable copy: what any strategy, at any world size, resumes from, and what `recipe export` reads.

CHECKPOINT/portable/ holds, beside the backend's native `state`:
- `state-NNNNN.safetensors`: each parameter's full fp32 master weight and both Adam moments, under the keys
  `master/NAME`, `exp_avg/NAME`, `exp_avg_sq/NAME` (NAME as `model.named_parameters()` lists it: a tied
  embedding once, as model.embed_tokens.weight). Gathered one parameter at a time (Strategy.portable_state)
  and written by rank 0 in files of about SHARD_BYTES, so no rank holds more than one file's worth.
- `index.json`: Adam's step, the parameter names in order, and which file holds each key.
- `train.pt`: Lightning's checkpoint without its tensors: loops, LR scheduler, callbacks (the losses so far),
  the data position (in optimizer steps: recipes/data.py recounts it for another split of the global batch)
  and the precision plugin's state.
- `hf-config/`: the model's config.json and tokenizer files, so that `recipe export` needs nothing else.

The tensors are the optimizer's own fp32 state under every backend (DeepSpeed's fp32 partitions, FSDP2's
sharded master, DDP's parameters), so a resume continues the same run: the same losses as the uninterrupted
one within fp32 rounding (tests/recipes/test_portable.py). It costs 12 bytes per parameter on disk beside the
native copy; `--no-portable-checkpoints` leaves it out (and with it resuming elsewhere and `recipe export`).
"""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any, Optional

import lightning.pytorch as pl
import torch

KINDS = ("master", "exp_avg", "exp_avg_sq")
SHARD_BYTES = 2 << 30
HF_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
            "special_tokens_map.json", "tokenizer.model")


class ShardWriter:
    """Tensors into safetensors files of about SHARD_BYTES under a folder, as they come; `close()` returns the
    key -> file map. What the portable copy and `recipe export` both write."""

    def __init__(self, folder: Path, prefix: str) -> None:
        self.folder, self.prefix = folder, prefix
        self.weight_map: dict[str, str] = {}
        self.total = 0
        self._pending: dict[str, torch.Tensor] = {}

    def add(self, key: str, tensor: torch.Tensor) -> None:
        self._pending[key] = tensor.contiguous()
        self.total += tensor.numel() * tensor.element_size()
        if sum(t.numel() * t.element_size() for t in self._pending.values()) >= SHARD_BYTES:
            self._flush()

    def close(self) -> dict[str, str]:
        self._flush()
        return self.weight_map

    def _flush(self) -> None:
        from safetensors.torch import save_file

        if self._pending:
            file = f"{self.prefix}-{len(set(self.weight_map.values())) + 1:05d}.safetensors"
            save_file(self._pending, str(self.folder / file), metadata={"format": "pt"})
            self.weight_map.update({k: file for k in self._pending})
            self._pending.clear()


def write(folder: Path, strategy, model: torch.nn.Module, optimizer: Any, rank0: bool, model_folder: str) -> None:
    """Collective (every rank): the tensors and index.json under folder (rank 0 writes; folder exists there)."""
    step = strategy.portable_step(optimizer)
    names: list[str] = []
    writer = ShardWriter(folder, "state")
    for name, full in strategy.portable_state(model, optimizer):
        if rank0:
            names.append(name)
            for kind in KINDS:
                writer.add(f"{kind}/{name}", full[kind])
    if rank0:
        (folder / "index.json").write_text(json.dumps({"adam_step": step, "parameters": names,
                                                       "weight_map": writer.close()}, indent=1))
        (folder / "hf-config").mkdir()
        for f in HF_FILES:
            if (Path(model_folder) / f).exists():
                shutil.copy(Path(model_folder) / f, folder / "hf-config" / f)


def train_state(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """Lightning's checkpoint dict without the model's and the optimizer's tensors (what train.pt keeps)."""
    kept = {k: v for k, v in checkpoint.items() if k not in ("state_dict", "optimizer_states")}
    kept["optimizer_states"] = []  # Lightning checks the key is there; load_portable sets the optimizer
    return kept


class Reader:
    """The tensors of a portable folder, one at a time (safetensors files are memory-mapped, not read whole)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        index = json.loads((folder / "index.json").read_text())
        self.step, self.names, self.weight_map = int(index["adam_step"]), list(index["parameters"]), index["weight_map"]
        self._files: dict[str, Any] = {}

    def read(self, kind: str, name: str, rows: Optional[tuple[int, int]] = None) -> torch.Tensor:
        from safetensors import safe_open

        key = f"{kind}/{name}"
        file = self.weight_map[key]
        if file not in self._files:
            self._files[file] = safe_open(str(self.folder / file), framework="pt", device="cpu")
        f = self._files[file]
        return f.get_slice(key)[rows[0]:rows[1]] if rows else f.get_tensor(key)


def resume_from(lightning_strategy, folder: Path) -> str:
    """Make the Lightning strategy restore the loops, scheduler, callbacks and data position from train.pt, and
    leave the model and optimizer to LoadPortable. Returns the ckpt_path for trainer.fit."""
    path = folder / "train.pt"
    lightning_strategy.load_checkpoint = lambda *a, **k: torch.load(path, map_location="cpu", weights_only=False)
    lightning_strategy.load_model_state_dict = lambda *a, **k: None
    lightning_strategy.load_optimizer_state_dict = lambda *a, **k: None
    return str(path)


class LoadPortable(pl.Callback):
    """On every rank, before the first optimizer step: the weights, Adam's moments and step from the portable copy."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def on_train_start(self, trainer: pl.Trainer, pl_module) -> None:
        t0 = time.perf_counter()
        reader = Reader(self.folder)
        pl_module.strategy.load_portable(pl_module.model, trainer.optimizers[0], reader.read, reader.step)
        self.seconds = round(time.perf_counter() - t0, 2)

