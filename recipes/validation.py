"""Validation: the held-out blocks (--val-split) or a validation set (--val-data), and its loss at step boundaries.

The loss is the mean over every target of the whole validation set, the same under every strategy and world size:
the validation blocks, in data order, are dealt in rounds of micro-batch x world size, rank r taking the r-th
micro-batch of each round; a rank whose slot lies past the last block runs a filler micro-batch without targets,
so that every rank runs the same number of forward passes (ZeRO-3 and FSDP gather parameters collectively in each).
Each rank sums its targets' losses and counts them; one all-reduce adds the ranks' sums and counts; loss = sum /
count. The model runs in eval mode without gradients, and is put back in train mode: no RNG is drawn, no data loader
moves, so training continues as it would have without validation.

--val-batches N validates on the first N global batches of the set only (N x micro-batch x grad-accum x world size
blocks, in data order), dealt the same way: the same blocks under every strategy and split of the global batch. The
launching process counts them (`validated_sequences` in summary.json's data.validation, there with --val-batches
only); the ranks take that many.
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Optional

import numpy as np
import torch

from shardlab.core.errors import UserError

if TYPE_CHECKING:
    from shardlab.recipes.data_cache import DataCache

IGNORE = -100  # a label that is no target (Hugging Face's ignore_index)
SPLIT_STREAM = 0x76616C  # mixed with --seed: the split's permutation is not an epoch's order (recipes/data.py)


def split_rows(n_blocks: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """--val-split: (training rows, validation rows), each in data order. The validation rows are the first
    ceil(fraction x n_blocks) of a permutation seeded by --seed: fixed by the data and the seed alone."""
    held = math.ceil(fraction * n_blocks)
    order = np.random.default_rng([seed, SPLIT_STREAM]).permutation(n_blocks)
    return np.sort(order[held:]), np.sort(order[:held])


def check_split(n_blocks: int, fraction: float, seed: int, global_batch: int, seq_len: int) -> None:
    """Enough blocks for at least one validation block and one training global batch."""
    train_rows, val_rows = split_rows(n_blocks, fraction, seed)
    if len(train_rows) < global_batch or not len(val_rows):
        raise UserError(f"--val-split {fraction}: --data gives {n_blocks} blocks of {seq_len} tokens; holding out "
                        f"{len(val_rows)} for validation leaves {len(train_rows)} to train on, but one optimizer step "
                        f"needs {global_batch}; give more data, or lower --val-split, --seq-len or --micro-batch-size")


def prepare_validation(c, sequences: int, folder: Path, world_size: int) -> tuple[Optional[dict], Optional["DataCache"]]:
    """In the launching process, before any rank starts: the validation set checked, --val-data tokenised into the
    data cache as --data is. -> (summary.json's data.validation, --val-data's cache); (None, None) without validation."""
    from shardlab.recipes.data_cache import prepare_data
    from shardlab.recipes.model import cache_dir

    global_batch = c.micro_batch_size * c.grad_accum * world_size
    if c.val_split is not None:
        check_split(sequences, c.val_split, c.seed, global_batch, c.seq_len)
        held = len(split_rows(sequences, c.val_split, c.seed)[1])
        return {"source": f"--val-split {c.val_split}", "sequences": held, "trained_sequences": sequences - held,
                **_cap(held, c.val_batches, global_batch)}, None
    if c.val_data is None:
        return None, None
    with validation_flag():
        val = prepare_data(c.val_data, c.data_field, c.seq_len, folder, c.data_workers, cache_dir(), c.data_format,
                           c.long_examples)
    if not val.sequences:
        raise UserError(f"--val-data {c.val_data}: {val.meta['truncated']} tokens, not one block of --seq-len "
                        f"{c.seq_len}; give more validation data or a lower --seq-len")
    return {"source": c.val_data, **val.summary(), **_cap(val.sequences, c.val_batches, global_batch)}, val


def _cap(sequences: int, val_batches: Optional[int], global_batch: int) -> dict:
    """With --val-batches, data.validation's `validated_sequences`: the first that many global batches' sequences of
    the set, at most all of them (without it: nothing, every one of `sequences` is validated on)."""
    return {} if val_batches is None else {"validated_sequences": min(sequences, val_batches * global_batch)}


def cap_note(val_batches: Optional[int], validation: Optional[dict]) -> str:
    """What the launching process says of --val-batches (nothing without it): how many sequences it validates on."""
    if val_batches is None or validation is None:
        return ""
    used, held = validation["validated_sequences"], validation["sequences"]
    whole = " (all of them: the set is no larger)" if used == held else ""
    return (f"\nvalidation: --val-batches {val_batches}: the first {used} of the {held} validation sequences validated "
            f"on{whole}")


@contextmanager
def validation_flag() -> Iterator[None]:
    """--val-data's problems are reported as --data's are (the same loader), under its own flag."""
    try:
        yield
    except UserError as e:
        msg = str(e)
        raise UserError("--val-data" + msg.removeprefix("--data") if msg.startswith("--data ") else f"--val-data: {msg}") from None


class Rows:
    """Some rows of a blocks (or labels) array, in order, indexed as the array itself: the blocks --val-split leaves
    for training, still memory-mapped (a row is read when it is trained on)."""

    def __init__(self, array, rows: np.ndarray) -> None:
        self.array, self.rows = array, np.asarray(rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i):
        return self.array[self.rows[i]]


def _first(array, n: int):
    """The first n rows of a blocks (or labels) array or Rows, still memory-mapped (nothing is read)."""
    if array is None:
        return None
    return Rows(array.array, array.rows[:n]) if isinstance(array, Rows) else array[:n]


def split_for_validation(blocks, labels, fraction: Optional[float], seed: int, val_blocks: Optional[Path] = None,
                         val_labels: Optional[Path] = None,
                         limit: Optional[int] = None) -> tuple[object, object, Optional["ValidationSet"]]:
    """In each rank: (the blocks and labels to train on, the validation set or None). --val-split (fraction) holds out
    rows of the blocks; --val-data's cached blocks.npy and labels.npy (val_blocks, val_labels) are memory-mapped.
    limit: validate on the set's first `limit` sequences only (--val-batches: data.validation's validated_sequences)."""
    if fraction is None:
        if val_blocks is None:
            return blocks, labels, None
        from shardlab.recipes.data_cache import open_blocks

        val = ValidationSet(open_blocks(val_blocks), open_blocks(val_labels) if val_labels else None)
        return blocks, labels, val.first(limit)
    train_rows, val_rows = split_rows(len(blocks), fraction, seed)
    rows = lambda array, which: None if array is None else Rows(array, which)  # noqa: E731
    val = ValidationSet(rows(blocks, val_rows), rows(labels, val_rows))
    return rows(blocks, train_rows), rows(labels, train_rows), val.first(limit)


def targets(labels: torch.Tensor) -> int:
    """Targets of a micro-batch: labels other than -100, past each block's first token (which nothing predicts)."""
    return int((labels[:, 1:] != IGNORE).sum())


@dataclass
class ValidationSet:
    """The validation blocks (and their labels for chat and instruction data; None: every token is a target)."""

    blocks: object
    labels: Optional[object] = None

    def __len__(self) -> int:
        return len(self.blocks)

    def _labels(self, i: int) -> torch.Tensor:
        source = self.blocks if self.labels is None else self.labels
        return torch.from_numpy(np.asarray(source[i]).astype(np.int64))

    def first(self, n: Optional[int]) -> "ValidationSet":
        """The set's first n blocks (None: all of it)."""
        if n is None or n >= len(self):
            return self
        return ValidationSet(_first(self.blocks, n), _first(self.labels, n))

    def rounds(self, micro_batch_size: int, world_size: int) -> int:
        return math.ceil(len(self) / (micro_batch_size * world_size))

    def micro_batches(self, micro_batch_size: int, world_size: int, rank: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """This rank's (input_ids, labels) micro-batches, as many on every rank (see the module's docstring)."""
        for k in range(self.rounds(micro_batch_size, world_size)):
            first = (k * world_size + rank) * micro_batch_size
            ids, labels = [], []
            for i in range(first, first + micro_batch_size):
                real = i < len(self)
                j = i if real else 0  # a filler block: its labels are no targets
                ids.append(torch.from_numpy(np.asarray(self.blocks[j]).astype(np.int64)))
                labels.append(self._labels(j) if real else torch.full_like(ids[-1], IGNORE))
            yield torch.stack(ids), torch.stack(labels)


def due(step: int, every: Optional[int], max_steps: int) -> bool:
    """Validate after optimizer step `step`: every --val-every steps, and after the last."""
    return step >= max_steps or (every is not None and step % every == 0)
