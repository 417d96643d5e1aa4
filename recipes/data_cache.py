"""The tokenised data on disk: built once by the launching process, memory-mapped by every rank.

SHARDLAB_CACHE/data/KEY/ holds blocks.npy (uint32 [sequences, seq_len]), for chat and instruction formats labels.npy
(int32, the same shape, -100 where not a target), and meta.json; KEY hashes the data files (paths, sizes,
modification times), the tokenizer files' contents, --data-format, the text field, --long-examples and --seq-len.
A second run with the same key starts without tokenising; a cache folder that does not read back is rebuilt
(with a warning). The intermediate `datasets` tables live in a temporary folder beside it and go when it is done.

Several processes may prepare one cache at once (the nodes of a multi-node run on a shared filesystem, two runs
started together). One at a time holds the key's lock file (flock): the first builds, the others wait and then read
what it built. Where the filesystem's locks do not reach every process (or it has none), both build, each in a
folder of its own name (host, process, random), and publish it by an atomic rename to the key's name: the first
rename wins, a later one finds the folder there and discards its own copy for the one published (the same bytes:
building is deterministic). A cache folder is never seen half-written, nor half-removed: a bad one is renamed
aside before it is deleted. What a build killed on this host left (its process gone) goes with the key's next
preparation.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import secrets
import shutil
import socket
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional

import numpy as np

from shardlab.core import trace
from shardlab.core.errors import UserError

VERSION = 2  # of the packing: a change to what blocks.npy holds bumps it (2: examples by best-fit decreasing)
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
    def labels_file(self) -> Optional[Path]:
        """labels.npy, for the formats trained on some tokens only; None for text (every token is a target)."""
        return None if self.meta["format"] == "text" else self.folder / "labels.npy"

    @property
    def sequences(self) -> int:
        return int(self.meta["sequences"])

    def summary(self) -> dict:
        """summary.json's `data` (chat and instruction formats add `padding`: EOS tokens that fill blocks' ends)."""
        padding = {"padding": self.meta["padding"]} if "padding" in self.meta else {}
        return {**{k: self.meta[k] for k in SUMMARY}, **padding, "cache": str(self.folder)}


def open_blocks(file: Path) -> np.ndarray:
    """The blocks, memory-mapped read-only: a rank's pages come from the page cache, shared by every rank."""
    return np.load(file, mmap_mode="r")


def cache_key(source_fingerprint: list, tokenizer_folder: Path, fmt: str, text_field: str, seq_len: int,
              long_examples: str = "truncate") -> str:
    from shardlab.recipes.data_chat import DEFAULTS_KEY

    tokenizer = hashlib.sha256()
    for name in TOKENIZER_FILES:
        if (tokenizer_folder / name).is_file():
            tokenizer.update(name.encode() + b"\0" + (tokenizer_folder / name).read_bytes())
    spec = {"version": VERSION, "files": source_fingerprint, "tokenizer": tokenizer.hexdigest(), "format": fmt,
            "field": text_field, "seq_len": seq_len, "long_examples": long_examples, "templates": DEFAULTS_KEY}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def prepare_data(data: Optional[str], text_field: str, seq_len: int, tokenizer_folder: Path, workers: Optional[int],
                 root: Path, fmt: str = "text", long_examples: str = "truncate") -> DataCache:
    """The cache for this data, tokenizer, --data-format, --long-examples and --seq-len: found, or built (one process
    builds, the others wait)."""
    from shardlab.recipes import data as data_lib
    from shardlab.recipes.data_load import find_source

    trace.note("data")  # once per run, in the launching process: the ranks memory-map what it found or built
    source = find_source(data, data_lib.embedded_corpus_path())
    key = cache_key(source.fingerprint(), tokenizer_folder, fmt, text_field, seq_len, long_examples)
    final = root / "data" / key
    final.parent.mkdir(parents=True, exist_ok=True)
    with _locked(final.with_name(f".{key}.lock")):
        _sweep(final)
        warnings = []
        if final.exists():
            found, problem = _read(final, seq_len)
            if found:
                return found
            warnings.append(f"data cache {final} does not read back ({problem}); rebuilt it")
            _discard(final)
        t0 = time.perf_counter()
        tmp = _private(final, "tmp")
        try:
            meta = _build(source, text_field, seq_len, tokenizer_folder, workers or default_workers(), fmt,
                          long_examples, tmp, key)
            theirs = _publish(tmp, final, seq_len)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return DataCache(final, theirs.meta if theirs else meta, built=True, seconds=time.perf_counter() - t0,
                         warnings=warnings)


def default_workers() -> int:
    """--data-workers when not given: one per CPU core this process may use, at most 8."""
    from shardlab.core.hardware import usable_cores

    return max(1, min(8, usable_cores()))


def _build(source, text_field: str, seq_len: int, tokenizer_folder: Path, workers: int, fmt: str, long_examples: str,
           tmp: Path, key: str) -> dict:
    """The cache built whole in `tmp` (a new folder of this process's own): blocks.npy, any labels.npy, meta.json."""
    from transformers import AutoTokenizer

    from shardlab.recipes.data_load import load_documents

    trace.note("tokenise")
    tmp.mkdir(parents=True)
    where = "the shipped corpus" if source.given is None else source.given
    docs = load_documents(source, text_field, tmp, fmt)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_folder)
    build = _build_text if docs.format == "text" else _build_examples
    counts, used, extra = build(docs, tokenizer, workers, seq_len, long_examples, tmp, where)
    meta = {"format": docs.format, "records": docs.records, **counts,
            "field": text_field, "seq_len": seq_len, "dtype": "uint32", "key": key, "data": source.given,
            "workers": used, "asked": fmt, "found": docs.found, **extra}
    del docs
    shutil.rmtree(tmp / "hf", ignore_errors=True)  # the intermediate tables: only blocks.npy is read again
    (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
    return meta


def _publish(tmp: Path, final: Path, seq_len: int) -> Optional[DataCache]:
    """Rename the built folder to the key's name (atomic: readers see all of it or nothing) -> None; or, where another
    process published the key first, discard ours -> theirs (replaced by ours if it does not read back)."""
    for _ in range(2):
        try:
            os.rename(tmp, final)
            return None
        except OSError as e:
            if e.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
        found, _ = _read(final, seq_len)
        if found:
            _discard(tmp)
            return found
        _discard(final)
    raise UserError(f"data cache {final}: other processes kept replacing it while this one built it; run again when "
                    f"they are done")


def _private(final: Path, kind: str) -> Path:
    """A name beside `final` that no other process uses, also on another host of a shared filesystem."""
    return final.with_name(f".{final.name}.{kind}-{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}")


def _sweep(final: Path) -> None:
    """Remove what builds of this key killed on this host left (their process is gone): a temporary folder can hold
    a corpus's worth of tables. Those of other hosts are left alone: this process cannot tell whether they still run."""
    host = socket.gethostname()
    for kind in ("tmp", "old"):
        prefix = f".{final.name}.{kind}-{host}-"
        for leftover in final.parent.glob(f".{final.name}.{kind}-*"):
            rest = leftover.name[len(prefix):] if leftover.name.startswith(prefix) else ""
            pid = rest.split("-")[0]
            if pid.isdigit() and rest.count("-") == 1 and not _alive(int(pid)):
                shutil.rmtree(leftover, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _discard(folder: Path) -> None:
    """Remove a cache folder: renamed aside first (so no process finds it half-removed), then deleted."""
    aside = _private(folder, "old")
    try:
        os.rename(folder, aside)
    except FileNotFoundError:  # another process removed it first
        return
    shutil.rmtree(aside, ignore_errors=True)


def _build_text(docs, tokenizer, workers: int, seq_len: int, long_examples: str, tmp: Path,
                where: str) -> tuple[dict, int, dict]:
    """Documents tokenised and packed into blocks.npy (recipes/data_pack.py): counts, processes used, nothing more."""
    from shardlab.recipes.data_pack import pack, tokenise

    tokens, blank, used = tokenise(docs.parts, tokenizer, workers)
    if docs.dropped + blank == docs.records:
        raise UserError(f"--data {where}: the files hold no text ({docs.records} documents, all empty); "
                        f"give files with text")
    return {**pack(tokens, seq_len, tmp / "blocks.npy"), "dropped": docs.dropped + blank}, used, {}


def _build_examples(docs, tokenizer, workers: int, seq_len: int, long_examples: str, tmp: Path,
                    where: str) -> tuple[dict, int, dict]:
    """Chat or instruction examples rendered, masked and packed into blocks.npy and labels.npy: counts, processes used,
    and what meta.json adds (the template, --long-examples)."""
    from shardlab.recipes.data_chat import template_for, tokenise_examples
    from shardlab.recipes.data_pack import pack_examples

    template, template_name = template_for(tokenizer)
    tables, used = tokenise_examples(docs.parts, docs.names, tokenizer, template, docs.format, workers)
    pad = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0
    counts = pack_examples(tables, seq_len, pad, long_examples, tmp / "blocks.npy", tmp / "labels.npy")
    if not counts["sequences"]:
        why = ("longer than --seq-len under --long-examples drop; raise --seq-len or give --long-examples truncate"
               if long_examples == "drop" else f"without an assistant token in their first {seq_len} tokens; raise --seq-len")
        raise UserError(f"--data {where}: no example is left to train on: all {docs.records} {docs.format} examples are "
                        f"{why}")
    return counts, used, {"template": template_name, "long_examples": long_examples}


def _read(folder: Path, seq_len: int) -> tuple[Optional[DataCache], str]:
    """The cache in `folder` if it reads back whole (meta.json, and blocks.npy and any labels.npy of the shape it
    says), else why not."""
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
    found = DataCache(folder, meta)
    if found.labels_file is not None:
        try:
            labels = open_blocks(found.labels_file)
        except (OSError, ValueError) as e:
            return None, f"labels.npy: {str(e).splitlines()[0][:160] if str(e) else type(e).__name__}"
        if labels.shape != want or labels.dtype != np.int32:
            return None, f"labels.npy is {labels.dtype} {list(labels.shape)}, meta.json says int32 {list(want)}"
    return found, ""


@contextmanager
def _locked(lock: Path) -> Iterator[None]:
    """One process at a time per key (the first builds, the others then read it). On a filesystem without flock
    (some network filesystems refuse it) nothing is held: _publish's atomic rename keeps the cache whole."""
    with open(lock, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX)
            held = True
        except OSError as e:
            if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                raise
            held = False
        try:
            yield
        finally:
            if held:
                fcntl.flock(f, fcntl.LOCK_UN)
