"""`recipe plan`: the resolved run for the given hardware, every strategy's memory estimate, and the choice.

It prints what `recipe run` with the same flags would do (its --strategy defaults to auto): the same
ResolvedRun (recipes/resolve.py), built without weights.
"""
from __future__ import annotations

import argparse
import json

from shardlab.core.config import RunConfig, load_config
from shardlab.core.hardware import GiB
from shardlab.core.resolved import ResolvedRun
from shardlab.recipes.resolve import resolve_run


# fsdp with Liger kernels 68,026 -> 73,680 tokens/s (53.0% -> 57.4% MFU) from micro-batch 8 to 16 on one H200,
# llama-1b (results/2026-12-02-liger-h200.md).
MICRO_BATCH_MEASURED = "fsdp, one H200, llama-1b: 68,026 tokens/s at micro-batch 8, 73,680 at 16"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from shardlab.recipes.run import add_run_arguments

    parser.add_argument("--json", action="store_true", help="print one JSON object: model, choice, reasons, strategies, resolved")
    parser.add_argument("--show-config", action="store_true",
                        help="print the run's config with every default and `auto` resolved, as YAML")
    add_run_arguments(parser)


def plan(cfg: RunConfig) -> ResolvedRun:
    """The run `recipe run` would do with these flags, for the hardware given or probed; --strategy defaults to auto."""
    if "strategy" not in cfg.model_fields_set:
        cfg = cfg.model_copy(update={"strategy": "auto"})
    return resolve_run(cfg, for_run=False)


def as_json(run: ResolvedRun) -> dict:
    c = run.config
    return {"model": run.model, "choice": c.strategy, "grad_accum": c.grad_accum, "micro_batch_size": c.micro_batch_size,
            "largest_micro_batch": run.largest_micro_batch,
            "reasons": run.auto["reasons"] if run.auto else [f"--strategy {c.strategy} was given"],
            "decisions": run.decisions, "strategies": run.candidates, "hardware": run.hardware.model_dump(),
            "workload": {"micro_batch_size": c.micro_batch_size, "seq_len": c.seq_len, "grad_accum": c.grad_accum,
                         "activation_checkpointing": c.activation_checkpointing, "precision": c.precision,
                         "gpus_per_node": c.devices, "num_nodes": c.num_nodes},
            "resolved": run.model_dump(mode="json")}


def main(args: argparse.Namespace) -> int:
    overrides = {k: v for k, v in vars(args).items() if k in RunConfig.model_fields}
    run = plan(load_config(getattr(args, "config", None), overrides))
    c = run.config
    if args.show_config:
        import yaml

        print(f"# resolved for {run.hardware.describe()}; `strategy` is the selector's choice when it was auto")
        print(yaml.safe_dump(c.model_dump(), sort_keys=False), end="")
        return 0
    if args.json:
        print(json.dumps(as_json(run), indent=2))
        return 0
    where = "GPU" if c.accelerator == "gpu" else "rank"
    m = run.model
    size = f"{m['params'] / 1e9:.2f}B" if m["params"] >= 1e9 else f"{m['params'] / 1e6:.2f}M"
    print(f"model: {m['name']}, {size} parameters{' (tied embeddings)' if m['tied'] else ''}")
    print(f"hardware: {run.hardware.describe()}; workload: micro-batch {c.micro_batch_size} x seq {c.seq_len} x "
          f"accumulation {c.grad_accum}, {c.precision}, activation checkpointing {'on' if c.activation_checkpointing else 'off'}")
    print(f"{'strategy':<20} {'per ' + where:>12} {'CPU per node':>13}  fits")
    for r in run.candidates:
        if r["gpu_bytes"] is None:
            print(f"{r['name']:<20} {'no estimate':>12} {'':>13}  -")
            continue
        print(f"{r['name']:<20} {r['gpu_bytes'] / GiB:>8.1f} GiB {r['cpu_bytes'] / GiB:>9.1f} GiB  {'yes' if r['fits'] else 'no'}")
    print(f"choice: {c.strategy}")
    for reason in (run.auto["reasons"] if run.auto else [f"--strategy {c.strategy} was given"]):
        print(f"  - {reason}")
    for decision in run.decisions:
        print(f"  - {decision}")
    if run.largest_micro_batch and run.largest_micro_batch > c.micro_batch_size:
        print(f"micro-batch: up to {run.largest_micro_batch} fits with {c.strategy} by the estimate (--micro-batch-size "
              f"auto takes it); larger ones ran faster ({MICRO_BATCH_MEASURED}) but change the global batch")
    return 0
