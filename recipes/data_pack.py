"""Tokenise documents with `datasets.map` over --data-workers processes, then pack the token stream into
[sequences, seq_len] blocks of a .npy file, streamed: neither step holds more than a batch in memory.

Packing (the `text` format): each document's tokens, then EOS, one document after another; cut into --seq-len
blocks, the tail that fills no whole block dropped (recipes/data.py token_blocks is the same in memory).
A format that masks labels (chat, instructions) adds a `labels` column here and a labels.npy beside blocks.npy.
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
