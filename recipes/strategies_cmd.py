"""`recipe strategies`: the registry as a table or JSON."""
from __future__ import annotations

import argparse
import json

from shardlab.core import registry


def main(args: argparse.Namespace) -> int:
    rows = [{"name": p.name, "family": p.family, "source": p.source, "description": p.description,
             "capabilities": p.capabilities.model_dump()} for p in registry.presets().values()]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'name':<18} {'offload':<10} {'shards':<22} description")
    for r in rows:
        c = r["capabilities"]
        shards = ",".join(k for k, key in [("optim", "shards_optimizer"), ("grads", "shards_gradients"),
                                            ("params", "shards_parameters")] if c[key]) or "-"
        print(f"{r['name']:<18} {c['offload']:<10} {shards:<22} {r['description']}")
    return 0
