"""`recipe export-config`: the ds_config.json or Accelerate YAML that reproduces a shardlab run outside it."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml

from shardlab.core.config import RunConfig, load_config
from shardlab.core.errors import UserError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from shardlab.recipes.flags import add_run_arguments

    parser.add_argument("--format", required=True, choices=["deepspeed", "accelerate"],
                        help="deepspeed: a ds_config.json; accelerate: an `accelerate launch --config_file` YAML")
    parser.add_argument("--output", required=True, help="file to write (written whole or not at all)")
    add_run_arguments(parser, exclude=("output",))


def main(args: argparse.Namespace) -> int:
    from shardlab.core import registry
    from shardlab.core.resolved import write_atomic
    from shardlab.recipes.resolve import allocator_env, resolve_run

    overrides = {k: v for k, v in vars(args).items() if k in RunConfig.model_fields and k != "output"}
    cfg = load_config(getattr(args, "config", None), overrides)
    if cfg.strategy == "auto":
        raise UserError("--strategy auto: export a named preset (`recipe plan` shows which one auto picks)")
    run = resolve_run(cfg, for_run=False, need_memory=False)  # a config for a cluster, not for here
    strategy = registry.get(run.config.strategy).build()
    content = strategy.external_config(args.format, run.context(), run.optimizer())
    out = Path(args.output)
    if not out.parent.is_dir():
        raise UserError(f"--output {args.output}: folder {out.parent} does not exist")
    text = json.dumps(content, indent=2) + "\n" if args.format == "deepspeed" else yaml.safe_dump(content, sort_keys=False)
    write_atomic(out, text)
    print(f"recipe: wrote {args.format} config of {run.config.strategy} to {out}")
    if run.config.float8 and args.format == "deepspeed":  # a ds_config.json has no float8 setting
        print("recipe: note: --float8 is not in a ds_config.json: convert the model's linears in your script "
              "(torchao.float8.convert_to_float8_training) before deepspeed.initialize")
    if run.config.experiments:  # an experiment may be settings (in the file) or shardlab's own code (not)
        print(f"recipe: note: experiments {','.join(run.config.experiments)}: the file holds what they set in the "
              f"backend's config; what shardlab's code does at run time (`recipe strategies` describes each) is not in it")
    if run.config.expandable_segments and allocator_env() is None:  # an environment variable, not in the file
        print("recipe: note: shardlab's GPU runs use expandable segments: set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
              "in your launcher's environment for the same allocator")
    return 0
