"""The tokenised data on disk: built once by the launching process, memory-mapped by every rank.

SHARDLAB_CACHE/data/KEY/ holds blocks.npy (uint32 [sequences, seq_len]) and meta.json; KEY hashes the data files
(paths, sizes, modification times), the tokenizer files' contents, the format, the text field and --seq-len.
A second run with the same key starts without tokenising; a cache folder that does not read back is rebuilt
(with a warning). The intermediate `datasets` tables live in a temporary folder beside it and go when it is done.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional

import numpy as np

from shardlab.core import trace
from shardlab.core.errors import UserError

VERSION = 1  # of the packing: a change to what blocks.npy holds bumps it
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json", "special_tokens_map.json",
                   "added_tokens.json", "vocab.json", "merges.txt")
SUMMARY = ("format", "records", "sequences", "tokens", "label_tokens", "truncated", "dropped")


@dataclass
class DataCache:
    """One built cache: where blocks.npy is, its counts, and whether this run built it."""

    folder: Path
    meta: dict
    built: bool = False
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)

    @property
    def blocks_file(self) -> Path:
        return self.folder / "blocks.npy"

    @property
    def sequences(self) -> int:
        return int(self.meta["sequences"])

    def summary(self) -> dict:
        """summary.json's `data`."""
        return {**{k: self.meta[k] for k in SUMMARY}, "cache": str(self.folder)}


def open_blocks(file: Path) -> np.ndarray:
    """The blocks, memory-mapped read-only: a rank's pages come from the page cache, shared by every rank."""
    return np.load(file, mmap_mode="r")


def cache_key(source_fingerprint: list, tokenizer_folder: Path, fmt: str, text_field: str, seq_len: int) -> str:
    tokenizer = hashlib.sha256()
    for name in TOKENIZER_FILES:
        if (tokenizer_folder / name).is_file():
            tokenizer.update(name.encode() + b"\0" + (tokenizer_folder / name).read_bytes())
    spec = {"version": VERSION, "files": source_fingerprint, "tokenizer": tokenizer.hexdigest(), "format": fmt,
            "field": text_field, "seq_len": seq_len}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def prepare_data(data: Optional[str], text_field: str, seq_len: int, tokenizer_folder: Path, workers: Optional[int],
                 root: Path, fmt: str = "text") -> DataCache:
    """The cache for this data, tokenizer, format and --seq-len: found, or built (one process builds, the others wait)."""
    from shardlab.recipes import data as data_lib
    from shardlab.recipes.data_load import find_source

    trace.note("data")  # once per run, in the launching process: the ranks memory-map what it found or built
    source = find_source(data, data_lib.embedded_corpus_path())
    key = cache_key(source.fingerprint(), tokenizer_folder, fmt, text_field, seq_len)
    final = root / "data" / key
    final.parent.mkdir(parents=True, exist_ok=True)
    with _locked(final.with_name(f".{key}.lock")):
        warnings = []
        if final.exists():
            found, problem = _read(final, seq_len)
            if found:
                return found
            warnings.append(f"data cache {final} does not read back ({problem}); rebuilt it")
            shutil.rmtree(final, ignore_errors=True)
        t0 = time.perf_counter()
        meta = _build(source, text_field, seq_len, tokenizer_folder, workers or default_workers(), fmt, final, key)
        return DataCache(final, meta, built=True, seconds=time.perf_counter() - t0, warnings=warnings)


def default_workers() -> int:
    """--data-workers when not given: one per CPU core this process may use, at most 8."""
    return max(1, min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


def _build(source, text_field: str, seq_len: int, tokenizer_folder: Path, workers: int, fmt: str, final: Path,
           key: str) -> dict:
    from transformers import AutoTokenizer

    from shardlab.recipes.data_load import load_documents
    from shardlab.recipes.data_pack import pack, tokenise

    trace.note("tokenise")
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        docs = load_documents(source, text_field, tmp)
        tokens, blank, used = tokenise(docs.parts, AutoTokenizer.from_pretrained(tokenizer_folder), workers)
        if docs.dropped + blank == docs.records:
            where = "the shipped corpus" if source.given is None else source.given
            raise UserError(f"--data {where}: the files hold no text ({docs.records} documents, all empty); "
                            f"give files with text")
        counts = pack(tokens, seq_len, tmp / "blocks.npy")
        meta = {"format": fmt, "records": docs.records, "dropped": docs.dropped + blank, **counts,
                "field": text_field, "seq_len": seq_len, "dtype": "uint32", "key": key, "data": source.given,
                "workers": used}
        del tokens, docs
        shutil.rmtree(tmp / "hf", ignore_errors=True)  # the intermediate tables: only blocks.npy is read again
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return meta


def _read(folder: Path, seq_len: int) -> tuple[Optional[DataCache], str]:
    """The cache in `folder` if it reads back whole (meta.json, and blocks.npy of the shape it says), else why not."""
    try:
        meta = json.loads((folder / "meta.json").read_text())
        missing = [k for k in (*SUMMARY, "seq_len") if k not in meta]
        if missing:
            return None, f"meta.json lacks {', '.join(missing)}"
        blocks = open_blocks(folder / "blocks.npy")
    except (OSError, ValueError) as e:
        return None, str(e).splitlines()[0][:160] if str(e) else type(e).__name__
    want = (int(meta["sequences"]), seq_len)
    if blocks.shape != want or blocks.dtype != np.uint32:
        return None, f"blocks.npy is {blocks.dtype} {list(blocks.shape)}, meta.json says uint32 {list(want)}"
    return DataCache(folder, meta), ""


@contextmanager
def _locked(lock: Path) -> Iterator[None]:
    """One process at a time per key (ranks that `recipe launch` starts each prepare: the first builds)."""
    with open(lock, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
