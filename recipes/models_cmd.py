"""`recipe models`: the shipped model shapes, counted from their configs (core/memory.py shape_of), as a table or JSON."""
from __future__ import annotations

import argparse
import json

from shardlab.core import memory
from shardlab.recipes.model import ALIASES, SHIPPED, llama_fields

COLUMNS = (("name", 16), ("params", 15), ("layers", 6), ("hidden", 6), ("heads", 5), ("kv heads", 8),
           ("vocab", 7), ("tied", 4), ("context", 7))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the shapes as JSON")


def rows() -> list[dict]:
    """Every shipped name: shapes by parameter count, then the older names (aliases)."""
    out = []
    for name in SHIPPED:
        config = llama_fields(name)
        s = memory.shape_of(config)
        out.append({"name": name, "alias_of": ALIASES.get(name), **s.describe(), "context": config["max_position_embeddings"]})
    return sorted(out, key=lambda r: (r["alias_of"] is not None, r["params"], r["name"]))


def main(args: argparse.Namespace) -> int:
    table = rows()
    if args.json:
        print(json.dumps(table, indent=2))
        return 0
    print("  ".join(f"{title:<{width}}" if i == 0 else f"{title:>{width}}" for i, (title, width) in enumerate(COLUMNS)))
    for r in table:
        cells = [r["name"], f"{r['params']:,}", r["layers"], r["hidden"], r["heads"], r["kv_heads"], r["vocab"],
                 "yes" if r["tied"] else "no", r["context"]]
        line = "  ".join(f"{c:<{w}}" if i == 0 else f"{c:>{w}}" for i, (c, (_, w)) in enumerate(zip(cells, COLUMNS)))
        print(line + (f"  alias of {r['alias_of']}" if r["alias_of"] else ""))
    print("params: unique (a tied embedding counted once). `recipe plan --model NAME` needs no weights; "
          "`recipe run --model NAME` builds random fp32 weights in CPU memory (4 bytes per parameter).")
    return 0
