"""The data side of the recipe as the ranks see it: token blocks and, for chat and instruction data, their labels
(built once on disk by recipes/data_cache.py), ordered by global batch: each optimizer step trains on the same
sequences under every strategy and every world size x micro-batch x grad-accum split of the global batch."""
from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Optional, Union

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler

from shardlab.core.errors import UserError


def embedded_corpus_path() -> Path:
    """Python's Language Reference text (PSF licence), shipped so `recipe run` needs no download."""
    return Path(str(resources.files("shardlab.recipes").joinpath("assets/corpus.txt")))


def embedded_corpus() -> str:
    return embedded_corpus_path().read_text(encoding="utf-8")


def token_blocks(texts: list[str], tokenizer, seq_len: int) -> torch.Tensor:
    """Documents joined with EOS and cut into [n, seq_len] blocks (the tail that does not fill one is dropped):
    in memory, for a few texts; `recipe run` builds the same blocks on disk (recipes/data_cache.py)."""
    eos = tokenizer.eos_token_id
    ids: list[int] = []
    for text in texts:
        ids += tokenizer(text, add_special_tokens=False)["input_ids"]
        if eos is not None:
            ids.append(eos)
    n = len(ids) // seq_len
    return torch.tensor(ids[: n * seq_len], dtype=torch.long).view(n, seq_len)


Array = Union[torch.Tensor, np.ndarray]


def _row(array: Array, i: int) -> torch.Tensor:
    if isinstance(array, torch.Tensor):
        return array[i]
    return torch.from_numpy(np.asarray(array[i]).astype(np.int64))  # an array, or its rows (recipes/validation.py Rows)


class Blocks(Dataset):
    """Token blocks [sequences, seq_len]: a tensor, or the cache's memory-mapped uint32 array (rows read as int64).

    With labels (chat and instruction data: the cache's int32 labels.npy, -100 where a token is not a target) an item
    is a dict: `input_ids`, `labels`, and `step_label_tokens`, the targets in the whole global batch the block is
    trained in, which GlobalBatchSampler hands over with the block's index (recipes/module.py divides by it)."""

    def __init__(self, blocks: Array, labels: Optional[Array] = None) -> None:
        self.blocks, self.labels = blocks, labels

    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, i):
        if self.labels is None:
            return _row(self.blocks, i)
        i, step_label_tokens = i
        return {"input_ids": _row(self.blocks, i), "labels": _row(self.labels, i),
                "step_label_tokens": torch.tensor(step_label_tokens, dtype=torch.int64)}


def label_tokens(labels: Array, rows: list[int]) -> int:
    """Targets in these blocks: labels other than -100, past each block's first token (which nothing predicts)."""
    return int((labels[rows][:, 1:] != -100).sum())


def epoch_order(n_blocks: int, seed: int, epoch: int) -> torch.Tensor:
    """Epoch `epoch`'s order of all blocks: one seeded permutation, the same on every rank and at every world size."""
    g = torch.Generator()
    g.manual_seed(seed + epoch)
    return torch.randperm(n_blocks, generator=g)


class GlobalBatchSampler(Sampler[int]):
    """One rank's block indices, in the order its micro-batches consume them.

    Optimizer step k of an epoch trains on the global batch order[k*G : (k+1)*G] of `epoch_order`, where
    G = micro-batch x grad-accum x world size. Rank r takes positions [r*P, (r+1)*P) of it, P = micro-batch
    x grad-accum, and its micro-batch j the positions r*P + j*mb .. r*P + (j+1)*mb. So every split of the same
    G trains each optimizer step on the same set of sequences, and at one world size a rank sees the same
    sequences whatever micro-batch x grad-accum gives its P. An epoch is its whole global batches: the last
    n_blocks mod G blocks of each epoch's order are not trained on in that epoch (Lightning would step on a
    partial accumulation at an epoch's end under DDP/FSDP and carry it into the next step under DeepSpeed).

    `steps_done` optimizer steps (of any split with the same G) are skipped: where a resumed run continues.
    With `labels` each index comes as (index, targets in its global batch) for Blocks."""

    def __init__(self, n_blocks: int, micro_batch_size: int, grad_accum: int, world_size: int, rank: int,
                 seed: int, steps_done: int = 0, labels: Optional[Array] = None) -> None:
        self.n_blocks, self.seed, self.steps_done, self.labels = n_blocks, seed, steps_done, labels
        self.per_rank = micro_batch_size * grad_accum
        self.global_batch = self.per_rank * world_size
        self.first = rank * self.per_rank  # this rank's offset in every global batch
        self.steps_per_epoch = n_blocks // self.global_batch
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:  # Lightning calls it at each epoch's start
        self.epoch = epoch

    def __len__(self) -> int:
        # A whole epoch, also when resuming part-way: Lightning counts a resumed epoch's batches from its
        # length, less the micro-batches it restored as done.
        return self.steps_per_epoch * self.per_rank

    def __iter__(self):
        order = epoch_order(self.n_blocks, self.seed, self.epoch).tolist()
        done = min(max(self.steps_done - self.epoch * self.steps_per_epoch, 0), self.steps_per_epoch)
        for step in range(done, self.steps_per_epoch):
            start = step * self.global_batch + self.first
            mine = order[start:start + self.per_rank]
            if self.labels is None:
                yield from mine
            else:  # every rank counts the whole global batch's targets: the same number on each, no communication
                everyone = order[step * self.global_batch:(step + 1) * self.global_batch]
                n = label_tokens(self.labels, sorted(everyone))
                yield from ((i, n) for i in mine)


def check_enough(n_blocks: int, micro_batch_size: int, world_size: int, seq_len: int, grad_accum: int = 1) -> None:
    need = micro_batch_size * world_size * grad_accum
    if n_blocks < need:
        what = "micro-batch x world size" + (" x grad-accum" if grad_accum > 1 else "")
        fix = "--micro-batch-size" + (" or --grad-accum" if grad_accum > 1 else "")
        raise UserError(
            f"--data: {n_blocks} blocks of {seq_len} tokens, but one optimizer step needs {need} "
            f"({what}); give more text, or lower --seq-len or {fix}"
        )
