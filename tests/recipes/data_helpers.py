"""Data files the data tests write, and their table-driven refusal check (test_data.py, test_data_chat.py)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from shardlab.core.errors import UserError


def write_records(path: Path, kind: str, records: list[dict]) -> Path:
    """Records as a .jsonl, .json, .parquet or .csv file."""
    import pandas as pd

    if kind == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    elif kind == "json":
        path.write_text(json.dumps(records))
    elif kind == "parquet":
        pd.DataFrame(records).to_parquet(path)
    elif kind == "csv":
        pd.DataFrame(records).to_csv(path, index=False)
    return path


def stream(cache) -> list[int]:
    """A data cache's blocks as one token stream."""
    from shardlab.recipes.data_cache import open_blocks

    return open_blocks(cache.blocks_file).reshape(-1).tolist()


def refusals(cases: dict[str, tuple], prepare: Callable, cache: Path) -> list[str]:
    """Each case {name: (input, expected)} must raise one UserError line containing `expected` when `prepare(input)`
    runs; -> what did not. Nothing but lock files may be left in the cache's data folder."""
    failures = []
    for name, (given, expected) in cases.items():
        try:
            prepare(given)
            failures.append(f"{name}: no error")
        except UserError as e:
            if expected not in str(e) or "\n" in str(e):
                failures.append(f"{name}: {e}")
    failures += [f"half written: {p.name}" for p in (cache / "data").iterdir() if not p.name.endswith(".lock")]
    return failures
