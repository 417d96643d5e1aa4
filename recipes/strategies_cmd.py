"""`recipe strategies`: the registry as a table or JSON, built-in and plug-in presets apart."""
from __future__ import annotations

import argparse
import json

from shardlab.core import registry


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the registry as JSON")


def main(args: argparse.Namespace) -> int:
    rows = [{"name": p.name, "family": p.family, "source": p.source, "description": p.description,
             "capabilities": p.capabilities.model_dump()} for p in registry.presets().values()]
    broken = [{"name": ep, "source": "plugin", "error": err} for ep, err in registry.broken().items()]
    if args.json:
        print(json.dumps(rows + broken, indent=2))
        return 0
    for title, group in (("built-in", [r for r in rows if r["source"] == "built-in"]),
                         ("plug-ins", [r for r in rows if r["source"] != "built-in"])):
        print(f"{title}:")
        if not group:
            print("  (none installed)")
        else:
            print(f"  {'preset':<18} {'offload':<10} {'shards':<20} description")
        for r in group:
            c = r["capabilities"]
            shards = ",".join(k for k, key in [("optim", "shards_optimizer"), ("grads", "shards_gradients"),
                                                ("params", "shards_parameters")] if c[key]) or "-"
            src = "" if r["source"] == "built-in" else f"  [{r['source']}]"
            print(f"  {r['name']:<18} {c['offload']:<10} {shards:<20} {r['description']}{src}")
            for name, what in c["experiments"].items():  # its levers, those on by default said so
                on = " (on by default; --experiments none: off)" if name in c["default_experiments"] else ""
                print(f"    --experiments {name}: {what}{on}")
    if broken:
        print("broken plug-ins (not loaded; every other strategy works):")
        for b in broken:
            print(f"  {b['name']}: {b['error']}")
    return 0
