"""Tokenise documents with `datasets.map` over --data-workers processes, then pack the token stream into
[sequences, seq_len] blocks of a .npy file, streamed: neither step holds more than a batch in memory (packing
examples: a window of them, below).

Packing (the `text` format): each document's tokens, then EOS, one document after another; cut into --seq-len
blocks, the tail that fills no whole block dropped (recipes/data.py token_blocks is the same in memory).
Packing examples (chat and instruction formats, recipes/data_chat.py): whole examples, each followed by EOS unless it
ends with one or ends its block exactly, by best-fit decreasing (the longest example first, into the block with the
least room that holds it, else a new block), within windows of about WINDOW_TOKENS consecutive examples' tokens; the
rest of a block is EOS padding. The blocks are ordered by window, then by when they were opened; a block's examples
by when they went in (longest first). The result is fixed by the data alone. An example never spans two blocks, so
it is always trained with its whole prompt in view; one longer than --seq-len is cut to its first --seq-len tokens or
left out (--long-examples). Their labels go to a labels.npy beside blocks.npy (int32, -100 where not a target:
prompts, separators, padding, and the first token of every example). Memory: the plan, a few numbers per example
(about 30 bytes), and one window's blocks.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import numpy as np

DTYPE = np.uint32
"""Token ids on disk (any vocabulary below 2**32)."""
TARGET_BATCH_CHARS = 4 << 20
"""Characters per tokeniser batch (so per worker in memory at once, with their token lists)."""


def tokenise(parts: list, tokenizer, workers: int) -> tuple[list, int, int]:
    """Each part as a table of `input_ids` (uint32, EOS after each document); how many blank records gave none;
    the most processes a part was tokenised over (fewer than `workers` for data under 4 MiB per process)."""
    import datasets
    import pyarrow.compute as pc

    features = datasets.Features({"input_ids": datasets.List(datasets.Value("uint32"))})
    out, blank, used = [], 0, 1
    for part in parts:
        chars = pc.sum(pc.utf8_length(part.data.column("text"))).as_py() or 0
        per_row = max(1, chars // max(len(part), 1))
        batch = int(min(1000, max(1, TARGET_BATCH_CHARS // per_row)))
        procs = min(workers, -(-len(part) // batch), max(1, chars // (4 << 20)))  # a process per 4 MiB at most
        used = max(used, procs)
        if procs > 1:  # the workers tokenise single-threaded: one per core (and no fork-after-threads warning)
            os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        tokens = part.with_format("arrow").map(_ids, batched=True, batch_size=batch, writer_batch_size=batch, features=features,
                          remove_columns=part.column_names, num_proc=procs if procs > 1 else None,
                          fn_kwargs={"tokenizer": tokenizer, "eos": tokenizer.eos_token_id, "pieces": "end" in part.column_names})
        if "end" not in part.column_names:
            blank += int(pc.sum(pc.equal(pc.list_value_length(tokens.data.column("input_ids")), 0)).as_py() or 0)
        out.append(tokens)
    return out, blank, used


def _ids(batch, tokenizer, eos: Optional[int], pieces: bool):
    """A batch of documents (or pieces of text files, `end` marking a file's end), as an arrow table -> their token
    ids, as an arrow table (arrow in and out: `datasets` converts no Python lists element by element)."""
    import pyarrow as pa

    texts = batch.column("text").to_pylist()
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if hasattr(backend, "encode_batch_fast"):  # the fast tokenizer itself, without offsets: 2-3x faster
        ids = [e.ids for e in backend.encode_batch_fast(texts, add_special_tokens=False)]
    else:
        ids = tokenizer(texts, add_special_tokens=False, return_attention_mask=False)["input_ids"]
    ends = batch.column("end").to_pylist() if pieces else [bool(t.strip()) for t in texts]
    if not pieces:  # a blank record: no tokens, no EOS
        ids = [i if end else [] for i, end in zip(ids, ends)]
    if eos is not None:
        ids = [i + [eos] if end else i for i, end in zip(ids, ends)]
    return pa.table({"input_ids": pa.array(ids, type=pa.list_(pa.uint32()))})


def pack(tokens: list, seq_len: int, out: Path) -> dict:
    """Write the blocks to `out` (a .npy of DTYPE [sequences, seq_len]) in order; return the counts."""
    import pyarrow.compute as pc

    total = sum(pc.sum(pc.list_value_length(t.data.column("input_ids"))).as_py() or 0 for t in tokens)
    sequences = total // seq_len
    want = sequences * seq_len
    written = 0
    with open(out, "wb") as f:  # plain writes, not a memmap: written pages do not stay in this process
        np.lib.format.write_array_header_1_0(f, {"descr": np.lib.format.dtype_to_descr(np.dtype(DTYPE)),
                                                 "fortran_order": False, "shape": (sequences, seq_len)})
        for record_batch in _record_batches(tokens):  # read, not mapped: memory stays one record batch
            ids = record_batch.column("input_ids").flatten().to_numpy(zero_copy_only=False)
            take = min(len(ids), want - written)
            if take > 0:
                f.write(np.ascontiguousarray(ids[:take], dtype=DTYPE).tobytes())
                written += take
    assert written == want, (written, want)
    return {"sequences": sequences, "tokens": want, "label_tokens": want, "truncated": total - want}


LABELS_DTYPE = np.int32
"""Labels on disk: a token id, or -100 (recipes/data_chat.py IGNORE)."""


WINDOW_TOKENS = 1 << 21
"""Examples are packed in windows of about this many tokens (or WINDOW_BLOCKS blocks' worth, if more), in data order:
an example's block holds examples of its own window only, so packing holds one window's blocks at a time (8 bytes a
token: ids and labels), writes them in order and reads the examples in order, once."""
WINDOW_BLOCKS = 64


@dataclass
class _Plan:
    """Where each example goes (`block`, -1 if left out; `offset` in it; `take`: its tokens written), and the windows
    as (first example, end example, first block, end block)."""

    take: np.ndarray
    block: np.ndarray
    offset: np.ndarray
    windows: list
    padding: int
    truncated: int
    dropped: int

    @property
    def blocks(self) -> int:
        return self.windows[-1][3] if self.windows else 0


def _plan(lengths: np.ndarray, first_label: np.ndarray, sep: np.ndarray, seq_len: int, drop_long: bool) -> _Plan:
    """The examples' blocks: what --long-examples leaves of each, then best-fit decreasing window by window."""
    long = lengths > seq_len
    dropped = long & (drop_long | (first_label < 0) | (first_label >= seq_len))  # no target within its first seq_len
    take = np.where(dropped, 0, np.minimum(lengths, seq_len)).astype(np.int32)
    window = max(WINDOW_TOKENS, WINDOW_BLOCKS * seq_len)
    before = np.cumsum(take, dtype=np.int64) - take  # tokens of the examples before each
    cut = np.flatnonzero(np.diff(before // window)) + 1  # where each window after the first starts
    block, offset = np.full(len(take), -1, np.int32), np.zeros(len(take), np.int32)
    windows, padding, first_block = [], 0, 0
    for lo, hi in zip([0, *cut.tolist()], [*cut.tolist(), len(take)]):
        block[lo:hi], offset[lo:hi], rooms = best_fit_decreasing(take[lo:hi], sep[lo:hi], seq_len)
        block[lo:hi] += np.where(block[lo:hi] >= 0, first_block, 0)
        windows.append((lo, hi, first_block, first_block + len(rooms)))
        padding, first_block = padding + sum(rooms), first_block + len(rooms)
    return _Plan(take, block, offset, windows, padding, int((long & ~dropped).sum()), int(dropped.sum()))


def best_fit_decreasing(take: np.ndarray, sep: np.ndarray, seq_len: int) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Best-fit decreasing bin packing: the examples longest first (ties in data order), each into the block with
    the least room that still holds it (ties: the block that reached that room last), else into a new block. An
    example takes `take` tokens, then its EOS separator (`sep`) unless it ends its block exactly.
    -> (each example's block, -1 for one of 0 tokens; its offset there; each block's room left: padding).

    O(n log n) for the sort, then a few steps per example: the blocks are kept in lists by room left, and the rooms
    that have a block as the bits of one integer, so the least room >= t is the lowest set bit of `rooms >> t`."""
    block, offset = np.full(len(take), -1, np.int32), np.zeros(len(take), np.int32)
    order = np.argsort(-(take + sep), kind="stable")
    order = order[take[order] > 0]
    by_room: list[list[int]] = [[] for _ in range(seq_len + 1)]
    rooms, left, placed = 0, [], []  # bit r of rooms: some block has r tokens of room; left[b]: block b's room
    for t, s in zip(take[order].tolist(), sep[order].tolist()):
        fits = rooms >> t
        if fits:
            room = t + (fits & -fits).bit_length() - 1
            b = by_room[room].pop()
            if not by_room[room]:
                rooms ^= 1 << room
        else:
            room, b = seq_len, len(left)
            left.append(seq_len)
        placed.append((b, seq_len - room))
        r = room - t - s
        left[b] = r if r > 0 else 0
        if r > 0:
            rooms |= 1 << r
            by_room[r].append(b)
    if placed:
        block[order], offset[order] = np.array(placed, np.int32).T
    return block, offset, left


def pack_examples(tables: list, seq_len: int, pad: int, long_examples: str, blocks_out: Path, labels_out: Path) -> dict:
    """Write the examples of recipes/data_chat.py tokenise_examples into blocks_out and labels_out (.npy, [sequences,
    seq_len]) by best-fit decreasing in windows (see the module doc), padding with `pad` (EOS); return the counts."""
    import pyarrow.compute as pc

    def column(name: str) -> np.ndarray:
        parts = [(pc.list_value_length(t.data.column(name)) if name == "input_ids" else t.data.column(name))
                 .to_numpy(zero_copy_only=False) for t in tables]
        return np.concatenate(parts) if parts else np.zeros(0, np.int32)

    # first pass: where every example goes, from three small columns
    plan = _plan(column("input_ids"), column("first_label"), column("sep").astype(np.int32), seq_len,
                 long_examples == "drop")
    counts = {"sequences": plan.blocks, "tokens": plan.blocks * seq_len, "label_tokens": 0, "truncated": plan.truncated,
              "dropped": plan.dropped, "padding": plan.padding}
    with open(blocks_out, "wb") as fb, open(labels_out, "wb") as fl:
        for f, dtype in ((fb, DTYPE), (fl, LABELS_DTYPE)):
            np.lib.format.write_array_header_1_0(f, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                                                     "fortran_order": False, "shape": (plan.blocks, seq_len)})
        for ids, labels in _windows(tables, plan, seq_len, pad):  # second pass: each window's blocks, in order
            fb.write(ids.data)  # the buffer itself, not a copy
            fl.write(labels.data)
            counts["label_tokens"] += int(np.count_nonzero(labels != -100))
    return counts


def _windows(tables: list, plan: _Plan, seq_len: int, pad: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The blocks (ids, labels) of each window of the plan in turn, filled from the examples read in order, one
    record batch at a time. Each is a view of one pair of buffers, refilled for the next window: write it before
    asking for the next."""
    most = max((end - first for _, _, first, end in plan.windows), default=0)
    ids_buffer, labels_buffer = np.empty((most, seq_len), DTYPE), np.empty((most, seq_len), LABELS_DTYPE)
    windows = iter(plan.windows)

    def start(window: tuple) -> tuple[int, int, np.ndarray, np.ndarray]:
        """A window's end example, its first block, and its blocks as padding: EOS, labels -100."""
        _, hi, first, end = window
        ids, labels = ids_buffer[:end - first], labels_buffer[:end - first]
        ids.fill(pad)
        labels.fill(-100)
        return hi, first, ids, labels

    hi, first, ids, labels = start(next(windows, (0, 0, 0, 0)))
    row = 0  # the example the next record batch starts with
    for batch in _record_batches(tables):
        starts = _flat(batch.column("input_ids"))[:-1]
        all_ids = batch.column("input_ids").flatten().to_numpy(zero_copy_only=False)
        all_labels = batch.column("labels").flatten().to_numpy(zero_copy_only=False)
        base, row = row, row + batch.num_rows
        done = base
        while done < row:  # the batch's examples of the current window, then of the next one
            assert hi > done, ("more examples than planned", done)
            upto = min(row, hi)
            here = slice(done, upto)
            _place(plan.take[here], plan.block[here] - first, plan.offset[here], starts[done - base:upto - base],
                   all_ids, all_labels, ids, labels)
            done = upto
            if done == hi:
                yield ids, labels
                hi, first, ids, labels = start(next(windows, (hi, hi, 0, 0)))
    assert row == hi, (row, hi)


def _place(take: np.ndarray, block: np.ndarray, offset: np.ndarray, starts: np.ndarray, all_ids: np.ndarray,
           all_labels: np.ndarray, ids: np.ndarray, labels: np.ndarray) -> None:
    """Copy examples (their first `take` tokens, from `starts` in a record batch's values) into a window's blocks
    at (block, offset); an example whose block is negative is left out. Each example's first label becomes -100:
    never a target predicted from the example before it."""
    keep = (block >= 0) & (take > 0)
    take, src = take[keep], starts[keep]
    dest = block[keep].astype(np.int64) * ids.shape[1] + offset[keep]
    flat_ids, flat_labels = ids.reshape(-1), labels.reshape(-1)
    to, source = _ranges(dest, take), _ranges(src, take)
    flat_ids[to] = all_ids[source]
    flat_labels[to] = all_labels[source]
    flat_labels[dest] = -100


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """start, start + 1, ..., start + length - 1 of every (start, length), one after another."""
    ends = np.cumsum(lengths)
    return np.arange(ends[-1] if len(ends) else 0) + np.repeat(starts - (ends - lengths), lengths)


def _record_batches(tables: list) -> Iterator:
    """The record batches of the tables `map` wrote, in row order, one at a time (read, not memory-mapped)."""
    import pyarrow as pa

    for t in tables:
        for name in _arrow_files(t):
            with pa.OSFile(name, "rb") as source:
                yield from pa.ipc.open_stream(source)


def _flat(column) -> np.ndarray:
    """Where each row of a list column starts in its flattened values, and where the last ends."""
    offsets = column.offsets.to_numpy()
    return offsets - offsets[0]


def _arrow_files(table) -> list[str]:
    """The arrow files of a table `map` wrote, in row order (one per worker, in rank order)."""
    files = [c["filename"] for c in table.cache_files]
    if not files or len(table._indices or []) or table.num_rows != sum(_rows(f) for f in files):
        raise RuntimeError("tokenised table is not a plain concatenation of its cache files")
    return files


def _rows(name: str) -> int:
    import pyarrow as pa

    with pa.memory_map(name) as source:
        return sum(b.num_rows for b in pa.ipc.open_stream(source))
