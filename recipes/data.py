"""The data side of the recipe: local text or JSONL, tokenised with the model folder's tokenizer,
packed into fixed-length blocks, and handed to every strategy in the same order."""
from __future__ import annotations

import json
import warnings
from importlib import resources
from pathlib import Path
from typing import Optional

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from shardlab.core import trace
from shardlab.core.errors import UserError

TEXT_SUFFIXES = {".txt", ".md", ".text"}
JSONL_SUFFIXES = {".jsonl", ".json"}


def embedded_corpus() -> str:
    """Python's Language Reference text (PSF licence), shipped so `recipe run` needs no download."""
    return resources.files("shardlab.recipes").joinpath("assets/corpus.txt").read_text(encoding="utf-8")


def _jsonl_texts(file: Path) -> list[str]:
    texts = []
    for n, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            raise UserError(f"--data {file}: line {n} is not JSON; each line must be an object with a 'text' field") from None
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise UserError(f"--data {file}: line {n} has no string 'text' field")
        texts.append(record["text"])
    return texts


def read_texts(path: Optional[str]) -> list[str]:
    if path is None:
        return [embedded_corpus()]
    root = Path(path)
    if not root.exists():
        raise UserError(f"--data {path}: no such file or folder; give a .txt, .md or .jsonl file or a folder of them")
    files = sorted(f for f in (root.rglob("*") if root.is_dir() else [root])
                   if f.is_file() and f.suffix.lower() in TEXT_SUFFIXES | JSONL_SUFFIXES)
    if not files:
        raise UserError(f"--data {path}: no .txt, .md or .jsonl files found")
    texts: list[str] = []
    for f in files:
        try:
            texts += _jsonl_texts(f) if f.suffix.lower() in JSONL_SUFFIXES else [f.read_text(encoding="utf-8")]
        except UnicodeDecodeError:
            raise UserError(f"--data {f}: not UTF-8 text") from None
    texts = [t for t in texts if t.strip()]
    if not texts:
        raise UserError(f"--data {path}: the files hold no text")
    return texts


def token_blocks(texts: list[str], tokenizer, seq_len: int) -> torch.Tensor:
    """Documents joined with EOS and cut into [n, seq_len] blocks (the tail that does not fill one is dropped)."""
    trace.note("tokenise")
    eos = tokenizer.eos_token_id
    ids: list[int] = []
    for text in texts:
        ids += tokenizer(text, add_special_tokens=False)["input_ids"]
        if eos is not None:
            ids.append(eos)
    n = len(ids) // seq_len
    return torch.tensor(ids[: n * seq_len], dtype=torch.long).view(n, seq_len)


class Blocks(Dataset):
    def __init__(self, blocks: torch.Tensor) -> None:
        self.blocks = blocks

    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.blocks[i]


# LlamaData carries the data position in its own state (below), which Lightning does not look at
# when it warns that a mid-epoch resume restarts the epoch: here it does not.
warnings.filterwarnings("ignore", message="You're resuming from a checkpoint that ended before the epoch ended")


class ResumableSampler(DistributedSampler):
    """DistributedSampler that can start an epoch part-way (a resumed run skips what it already trained on)."""

    def __init__(self, *args, per_step: int = 1, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.per_step = per_step  # samples of this rank per optimizer step (micro-batch x grad-accum)
        self.resume_at: Optional[tuple[int, int]] = None  # (epoch, samples of this rank already used)

    def __len__(self) -> int:
        # Whole optimizer steps only: Lightning steps DDP/FSDP on an epoch's last batch with a partial
        # accumulation, and under DeepSpeed it carries the tail into the next step (gradients of more
        # micro-batches than --grad-accum), so the tail of each epoch is dropped, as drop_last does.
        return super().__len__() // self.per_step * self.per_step

    def __iter__(self):
        indices = list(super().__iter__())[:len(self)]
        if self.resume_at is not None and self.resume_at[0] == self.epoch:
            indices = indices[self.resume_at[1]:]
            self.resume_at = None
        return iter(indices)


class LlamaData(pl.LightningDataModule):
    """Same seed, same world size -> the same global batches in the same order for every strategy.

    Its state in a checkpoint is the data position (epoch, micro-batches done in it), so a resumed run
    continues with the next batch instead of restarting the epoch (Lightning alone would restart it)."""

    def __init__(self, blocks: torch.Tensor, micro_batch_size: int, seed: int, grad_accum: int = 1) -> None:
        super().__init__()
        self.dataset, self.micro_batch_size, self.seed = Blocks(blocks), micro_batch_size, seed
        self.grad_accum = grad_accum
        self._resume: Optional[dict] = None

    def train_dataloader(self) -> DataLoader:
        sampler = ResumableSampler(self.dataset, num_replicas=self.trainer.world_size, rank=self.trainer.global_rank,
                                   shuffle=True, seed=self.seed, drop_last=True,
                                   per_step=self.micro_batch_size * self.grad_accum)
        if self._resume:
            sampler.resume_at = (self._resume["epoch"], self._resume["batches_done"] * self.micro_batch_size)
        return DataLoader(self.dataset, batch_size=self.micro_batch_size, sampler=sampler, drop_last=True)

    def state_dict(self) -> dict:
        loop = self.trainer.fit_loop
        return {"epoch": self.trainer.current_epoch,
                "batches_done": loop.epoch_loop.batch_progress.current.processed}

    def load_state_dict(self, state: dict) -> None:
        self._resume = state


def check_enough(blocks: torch.Tensor, micro_batch_size: int, world_size: int, seq_len: int, grad_accum: int = 1) -> None:
    need = micro_batch_size * world_size * grad_accum
    if len(blocks) < need:
        what = "micro-batch x world size" + (" x grad-accum" if grad_accum > 1 else "")
        fix = "--micro-batch-size" + (" or --grad-accum" if grad_accum > 1 else "")
        raise UserError(
            f"--data: {len(blocks)} blocks of {seq_len} tokens, but one optimizer step needs {need} "
            f"({what}); give more text, or lower --seq-len or {fix}"
        )
