"""Tokenise documents with `datasets.map` over --data-workers processes, then pack the token stream into
[sequences, seq_len] blocks of a .npy file, streamed: neither step holds more than a batch in memory.

Packing (the `text` format): each document's tokens, then EOS, one document after another; cut into --seq-len
blocks, the tail that fills no whole block dropped (recipes/data.py token_blocks is the same in memory).
Packing examples (chat and instruction formats, recipes/data_chat.py): whole examples in order, each followed by EOS
unless it ends with one, in a block while they fit (next fit); the rest of a block is EOS padding. An example never
spans two blocks, so it is always trained with its whole prompt in view; one longer than --seq-len is cut to its
first --seq-len tokens or left out (--long-examples). Their labels go to a labels.npy beside blocks.npy (int32, -100
where not a target: prompts, separators, padding, and the first token of every example).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

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
    import pyarrow as pa
    import pyarrow.compute as pc

    total = sum(pc.sum(pc.list_value_length(t.data.column("input_ids"))).as_py() or 0 for t in tokens)
    sequences = total // seq_len
    want = sequences * seq_len
    written = 0
    with open(out, "wb") as f:  # plain writes, not a memmap: written pages do not stay in this process
        np.lib.format.write_array_header_1_0(f, {"descr": np.lib.format.dtype_to_descr(np.dtype(DTYPE)),
                                                 "fortran_order": False, "shape": (sequences, seq_len)})
        for t in tokens:
            for name in _arrow_files(t):
                with pa.OSFile(name, "rb") as source:  # read, not mapped: memory stays one record batch
                    for record_batch in pa.ipc.open_stream(source):
                        ids = record_batch.column("input_ids").flatten().to_numpy(zero_copy_only=False)
                        take = min(len(ids), want - written)
                        if take > 0:
                            f.write(np.ascontiguousarray(ids[:take], dtype=DTYPE).tobytes())
                            written += take
    assert written == want, (written, want)
    return {"sequences": sequences, "tokens": want, "label_tokens": want, "truncated": total - want}


LABELS_DTYPE = np.int32
"""Labels on disk: a token id, or -100 (recipes/data_chat.py IGNORE)."""


class _NextFit:
    """Where each example goes: whole examples, in order, into the current block while they fit, else a new one."""

    def __init__(self, seq_len: int, drop_long: bool) -> None:
        self.seq_len, self.drop_long = seq_len, drop_long
        self.block, self.pos = 0, 0  # the block being filled, and how much of it is
        self.truncated = self.dropped = 0

    def place(self, length: int, first_label: int, sep: bool) -> Optional[tuple[int, int, int]]:
        """(block, offset, tokens) of the next example, or None if it is left out: longer than --seq-len under
        --long-examples drop, or with no target left within its first --seq-len tokens."""
        take = length
        if length > self.seq_len:
            if self.drop_long or not 0 <= first_label < self.seq_len:
                self.dropped += 1
                return None
            take, self.truncated = self.seq_len, self.truncated + 1
        if self.pos + take > self.seq_len:
            self.block, self.pos = self.block + 1, 0
        where = (self.block, self.pos, take)
        self.pos += take + (1 if sep and self.pos + take < self.seq_len else 0)  # the EOS separator, if there is room
        return where

    @property
    def blocks(self) -> int:
        return self.block + (1 if self.pos else 0)


def pack_examples(tables: list, seq_len: int, pad: int, long_examples: str, blocks_out: Path, labels_out: Path) -> dict:
    """Write the examples of recipes/data_chat.py tokenise_examples into blocks_out and labels_out (.npy, [sequences,
    seq_len]) by next fit (see the module doc), padding with `pad` (EOS); return the counts."""
    import pyarrow as pa
    import pyarrow.compute as pc

    plan = _NextFit(seq_len, long_examples == "drop")  # first pass: how many blocks, from three small columns
    for t in tables:
        lengths = pc.list_value_length(t.data.column("input_ids")).to_pylist()
        for length, first, sep in zip(lengths, t.data.column("first_label").to_pylist(), t.data.column("sep").to_pylist()):
            plan.place(length, first, sep)
    sequences = plan.blocks
    counts = {"sequences": sequences, "tokens": sequences * seq_len, "label_tokens": 0, "truncated": plan.truncated,
              "dropped": plan.dropped, "padding": 0}
    fit = _NextFit(seq_len, long_examples == "drop")
    ids, labels = np.full(seq_len, pad, DTYPE), np.full(seq_len, -100, LABELS_DTYPE)  # the block being filled
    current, used = 0, 0

    with open(blocks_out, "wb") as fb, open(labels_out, "wb") as fl:
        for f, dtype in ((fb, DTYPE), (fl, LABELS_DTYPE)):
            np.lib.format.write_array_header_1_0(f, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                                                     "fortran_order": False, "shape": (sequences, seq_len)})

        def flush() -> None:
            fb.write(ids.tobytes())
            fl.write(labels.tobytes())
            counts["label_tokens"] += int((labels != -100).sum())
            counts["padding"] += seq_len - used
            ids.fill(pad)
            labels.fill(-100)

        for t in tables:
            for name in _arrow_files(t):
                with pa.OSFile(name, "rb") as source:
                    for batch in pa.ipc.open_stream(source):
                        starts = _flat(batch.column("input_ids"))
                        all_ids = batch.column("input_ids").flatten().to_numpy(zero_copy_only=False)
                        all_labels = batch.column("labels").flatten().to_numpy(zero_copy_only=False)
                        rows = zip(starts[:-1].tolist(), starts[1:].tolist(), batch.column("first_label").to_pylist(),
                                   batch.column("sep").to_pylist())
                        for start, end, first, sep in rows:
                            where = fit.place(end - start, first, sep)
                            if where is None:
                                continue
                            block, offset, take = where
                            if block != current:
                                flush()
                                current, used = block, 0
                            ids[offset:offset + take] = all_ids[start:start + take]
                            labels[offset:offset + take] = all_labels[start:start + take]
                            labels[offset] = -100  # never a target predicted from the example before it
                            used = min(seq_len, offset + take + (1 if sep else 0))
        if sequences:
            flush()
    assert fit.blocks == sequences, (fit.blocks, sequences)
    return counts


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
