"""`recipe export-config`: the ds_config.json or Accelerate YAML that reproduces a shardlab run outside it."""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import yaml

from shardlab.core.config import RunConfig, load_config
from shardlab.core.errors import UserError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from shardlab.recipes.run import add_run_arguments

    parser.add_argument("--format", required=True, choices=["deepspeed", "accelerate"],
                        help="deepspeed: a ds_config.json; accelerate: an `accelerate launch --config_file` YAML")
    parser.add_argument("--output", required=True, help="file to write (written whole or not at all)")
    add_run_arguments(parser, exclude=("output",))


def main(args: argparse.Namespace) -> int:
    from shardlab.recipes.run import build_context, optimizer_spec

    overrides = {k: v for k, v in vars(args).items() if k in RunConfig.model_fields and k != "output"}
    cfg = load_config(getattr(args, "config", None), overrides)
    if cfg.strategy == "auto":
        raise UserError("--strategy auto: export a named preset (`recipe plan` shows which one auto picks)")
    cfg, preset, strategy, ctx = build_context(cfg, elsewhere=True)  # a config for a cluster, not for here
    content = strategy.external_config(args.format, ctx, optimizer_spec(cfg))
    out = Path(args.output)
    if not out.parent.is_dir():
        raise UserError(f"--output {args.output}: folder {out.parent} does not exist")
    text = json.dumps(content, indent=2) + "\n" if args.format == "deepspeed" else yaml.safe_dump(content, sort_keys=False)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, out)
    print(f"recipe: wrote {args.format} config of {preset.name} to {out}")
    return 0
