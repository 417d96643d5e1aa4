"""`recipe plan`: the resolved run for the given hardware, every strategy's memory estimate, and the choice.

It prints what `recipe run` with the same flags would do (its --strategy defaults to auto): the same
ResolvedRun (recipes/resolve.py), built without weights.
"""
from __future__ import annotations

import argparse
import json
import sys
import textwrap

from shardlab.core.config import RunConfig
from shardlab.core.hardware import human_bytes
from shardlab.core.resolved import ResolvedRun
from shardlab.core.selector import Budget
from shardlab.recipes.flags import add_run_arguments, run_config
from shardlab.recipes.resolve import NothingFits, resolve_run


# fsdp with Liger kernels 68,026 -> 73,680 tokens/s (53.0% -> 57.4% MFU) from micro-batch 8 to 16 on one H200,
# llama-1b (results/2026-12-02-liger-h200.md).
MICRO_BATCH_MEASURED = "fsdp, one H200, llama-1b: 68,026 tokens/s at micro-batch 8, 73,680 at 16"


# RunConfig fields only training reads (its data, checkpoints, export, metrics, seed, output folder, the launcher):
# plan accepts them, so a `recipe run` command line plans as it is with `plan` in its place, and --help leaves them out.
RUN_ONLY = ("data", "data_field", "data_format", "long_examples", "data_workers", "val_data", "val_split", "val_every",
            "val_batches",
            "metrics", "checkpoint_every", "keep_checkpoints", "portable_checkpoints", "resume", "export", "launcher",
            "node_rank", "master_addr", "master_port", "seed", "output")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object: model, choice, reasons, strategies, resolved; "
                                                          "when nothing fits, choice null, closest and fixes (exit 2)")
    parser.add_argument("--show-config", action="store_true",
                        help="print the run's config with every default and `auto` resolved, as YAML")
    add_run_arguments(parser, hidden=RUN_ONLY)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter  # the epilog's flags unbroken at their hyphens
    parser.epilog = textwrap.fill(f"Also accepted, so that a `recipe run` command line plans as it is: the flags only "
                                  f"training reads ({', '.join('--' + f.replace('_', '-') for f in RUN_ONLY)}; `recipe "
                                  f"run --help` describes them).", width=78, break_on_hyphens=False)


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
            "memory_headroom": c.memory_headroom, "budget": _budget_json(_budget(run)),
            "workload": {"micro_batch_size": c.micro_batch_size, "seq_len": c.seq_len, "grad_accum": c.grad_accum,
                         "activation_checkpointing": c.activation_checkpointing, "precision": c.precision,
                         "gpus_per_node": c.devices, "num_nodes": c.num_nodes},
            "resolved": run.model_dump(mode="json")}


def nothing_fits_json(e: NothingFits) -> dict:
    """The same table with every row `fits: false`, no choice, the closest option by the memory that binds and its fixes."""
    d, w = e.decision, e.work
    return {"model": e.model, "choice": None, "closest": d.closest, "binding": d.binding, "fixes": d.fixes,
            "reasons": d.reasons, "error": str(e), "strategies": e.rows, "hardware": e.budget.hw.model_dump(),
            "memory_headroom": e.budget.headroom, "budget": _budget_json(e.budget),
            "workload": {"micro_batch_size": w.micro_batch_size, "seq_len": w.seq_len, "grad_accum": None,
                         "activation_checkpointing": w.activation_checkpointing, "precision": w.precision,
                         "gpus_per_node": w.gpus_per_node, "num_nodes": w.num_nodes}}


def main(args: argparse.Namespace) -> int:
    try:
        run = plan(run_config(args))
    except NothingFits as e:  # exit 2 as any bad input, with the table that shows why
        print(json.dumps(nothing_fits_json(e), indent=2) if args.json else _nothing_fits_text(e))
        print(f"recipe: error: {e}", file=sys.stderr)
        return e.exit_code
    c = run.config
    if args.show_config:
        import yaml

        print(f"# resolved for {run.hardware.describe()}; `strategy` is the selector's choice when it was auto")
        print(yaml.safe_dump(c.model_dump(), sort_keys=False), end="")
        return 0
    if args.json:
        print(json.dumps(as_json(run), indent=2))
        return 0
    print(_table(run.model, _budget(run), f"micro-batch {c.micro_batch_size} x seq {c.seq_len} x accumulation "
                 f"{c.grad_accum}, {c.precision}, activation checkpointing {'on' if c.activation_checkpointing else 'off'}",
                 run.candidates))
    print(f"choice: {c.strategy}" + (f" + experiments {','.join(c.experiments)}" if c.experiments else ""))
    for reason in (run.auto["reasons"] if run.auto else [f"--strategy {c.strategy} was given"]):
        print(f"  - {reason}")
    for decision in run.decisions:
        print(f"  - {decision}")
    for line in run.warnings:  # what `recipe run` would warn of (a DeepSpeed file's ignored keys, an unchecked option)
        print(f"warning: {line}")
    if run.largest_micro_batch and run.largest_micro_batch > c.micro_batch_size:
        print(f"micro-batch: up to {run.largest_micro_batch} fits with {c.strategy} by the estimate (--micro-batch-size "
              f"auto takes it); larger ones ran faster ({MICRO_BATCH_MEASURED}) but change the global batch")
    return 0


def _nothing_fits_text(e: NothingFits) -> str:
    d, w = e.decision, e.work
    lines = [_table(e.model, e.budget, f"micro-batch {w.micro_batch_size} x seq {w.seq_len}, {w.precision}, "
                    f"activation checkpointing {'on' if w.activation_checkpointing else 'off'}", e.rows),
             "choice: none, no strategy fits"]
    lines += [f"  - {r}" for r in d.reasons]
    if d.closest:
        lines.append(f"closest: {d.closest}; what would make it fit:")
        lines += [f"  - {f}" for f in d.fixes]
    return "\n".join(lines)


def _table(model: dict, budget: Budget, workload: str, rows: list[dict]) -> str:
    """The header (model, hardware, workload, what fits means) and every candidate's estimate."""
    where = "GPU" if budget.hw.accelerator == "gpu" else "rank"
    size = f"{model['params'] / 1e9:.2f}B" if model["params"] >= 1e9 else f"{model['params'] / 1e6:.2f}M"
    lines = [f"model: {model['name']}, {size} parameters{' (tied embeddings)' if model['tied'] else ''}",
             f"hardware: {budget.hw.describe()}; workload: {workload}", budget.describe(),
             f"{'strategy':<20} {'per ' + where:>12} {'CPU per node':>13}  fits"]
    for r in rows:
        if r["gpu_bytes"] is None:
            lines.append(f"{r['name']:<20} {'no estimate':>12} {'':>13}  -")
            continue
        lines.append(f"{r['name']:<20} {human_bytes(r['gpu_bytes']):>12} {human_bytes(r['cpu_bytes']):>13}  "
                     f"{'yes' if r['fits'] else 'no'}")
    return "\n".join(lines)


def _budget(run: ResolvedRun) -> Budget:
    return Budget(run.hardware, run.config.memory_headroom, run.config.devices)


def _budget_json(budget: Budget) -> dict:
    return {"gpu_bytes": budget.gpu_bytes if budget.hw.accelerator == "gpu" else None, "cpu_bytes": budget.cpu_bytes,
            "describe": budget.describe()}
