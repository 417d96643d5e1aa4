"""`recipe compare --strategies A,B[,...]`: run each strategy from the same weights and batches, one
after another in its own processes, and report loss parity, throughput and memory."""
from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import json
import yaml

from shardlab.core import compare as cmp, registry
from shardlab.core.config import RunConfig, load_config
from shardlab.core.errors import RunFailed, UserError
from shardlab.core.resolved import ResolvedRun, write_json_atomic
from shardlab.recipes.resolve import resolve_run
from shardlab.recipes.flags import add_run_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--strategies", required=True,
                        help="comma-separated presets, the first the reference; PRESET:float8 runs it with --float8, "
                             "PRESET:offload-ratio=R with --offload-ratio R, PRESET:experiment=NAME with --experiments "
                             "NAME (repeat it for several; experiment=none: without the preset's default ones) (e.g. "
                             "fsdp,fsdp:float8: float8 against bf16; zero3:experiment=none,zero3: DeepSpeed's stock "
                             "ZeRO-3 against shardlab's)")
    parser.add_argument("--no-align", action="store_true",
                        help="run each backend's default dtypes and flag every mismatch instead of aligning them")
    parser.add_argument("--test-lr-override", action="append", default=[], help=argparse.SUPPRESS)  # NAME=LR, tests only
    add_run_arguments(parser, exclude=("strategy",))


def entry(name: str) -> dict[str, Any]:
    """The config fields one --strategies entry sets: PRESET, then optionally :float8 (--float8),
    :offload-ratio=R (--offload-ratio R) and :experiment=NAME (--experiments NAME; repeated, several; none: no
    experiment, not the preset's defaults), e.g. fsdp:float8, zero3_offload:offload-ratio=0.5 or zero3:experiment=none."""
    preset, *variants = name.split(":")
    fields: dict[str, Any] = {"strategy": preset}
    for variant in variants:
        key, _, value = variant.partition("=")
        if key == "float8" and not value:
            fields["float8"] = True
            continue
        if key == "offload-ratio":
            try:
                fields["offload_ratio"] = float(value)
            except ValueError:
                fields["offload_ratio"] = None
            if fields["offload_ratio"] is not None and 0 < fields["offload_ratio"] <= 1:
                continue
            raise UserError(f"--strategies {name}: offload-ratio={value} is not a share in (0, 1]; e.g. "
                            f"zero3_offload:offload-ratio=0.5")
        if key == "experiment" and value:
            named = fields.setdefault("experiments", [])
            named += [] if value in named or value == "none" else [value]
            continue
        raise UserError(f"--strategies {name}: unknown variant '{variant}'; PRESET:float8, PRESET:offload-ratio=R "
                        f"or PRESET:experiment=NAME (e.g. fsdp:float8), or the preset alone")
    return fields


def _plans(cfg: RunConfig, names: list[str]) -> dict[str, ResolvedRun]:
    return {n: resolve_run(entry_config(cfg, n)) for n in names}


def entry_config(cfg: RunConfig, name: str) -> RunConfig:
    """The run of one --strategies entry: the shared flags, then what the entry sets; an entry's experiments are
    added to those of --experiments."""
    fields = entry(name)
    if "experiments" in fields:
        fields["experiments"] = list(dict.fromkeys([*(cfg.experiments or []), *fields["experiments"]]))
    return cfg.model_copy(update=fields)


def compared(names: list[str]) -> tuple[str, ...]:
    """The config fields the entries set (strategy, float8, offload_ratio, experiments) and those the runs differ in
    by design (each preset's default experiments among them): what is compared, never a suspect."""
    return ("strategy", "output", "offload", "experiments", *sorted({k for n in names for k in entry(n)} - {"experiments"}))


def _folder(name: str) -> str:
    """An entry's name as a file name: fsdp:float8 -> fsdp-float8."""
    return name.replace(":", "-")


def _audit(prepared: dict[str, ResolvedRun]) -> dict[str, Any]:
    return {n: registry.get(r.config.strategy).build().precision_plan(r.context()) for n, r in prepared.items()}


def align_plans(base: RunConfig, names: list[str], prepared: dict[str, ResolvedRun], no_align: bool):
    """Each strategy's precision plan, aligned to the same dtypes unless no_align: (the alignment, the resolved runs
    and plans after it, the mismatches before it). In-process: no run starts."""
    precision = prepared[names[0]].config.precision
    plans = _audit(prepared)
    before = cmp.mismatches(plans)
    if no_align:
        alignment = cmp.Alignment(precision=precision, grad_reduce_dtype=base.grad_reduce_dtype,
                                  notes=["not aligned (--no-align): each backend's defaults"])
        return alignment, prepared, plans, before
    alignment = cmp.Alignment(precision=precision, grad_reduce_dtype=base.grad_reduce_dtype)
    for _ in range(3):  # precision first, then gradient reduction under the new precision
        step = cmp.align(alignment.precision, plans)
        if not step.notes:
            break
        alignment.precision = step.precision
        if step.grad_reduce_dtype != "auto":
            alignment.grad_reduce_dtype = step.grad_reduce_dtype
        alignment.notes += step.notes
        prepared = _plans(base.model_copy(update={"precision": alignment.precision,
                                                  "grad_reduce_dtype": alignment.grad_reduce_dtype}), names)
        plans = _audit(prepared)
    alignment.notes = alignment.notes or ["nothing to align: every strategy already used the same dtypes"]
    return alignment, prepared, plans, before


def _weights_diff(reference: str, other: str) -> float:
    from safetensors.torch import load_file

    def load(folder: str) -> dict:
        state: dict = {}
        for f in sorted(Path(folder).glob("*.safetensors")):
            state.update(load_file(f))
        return state

    a, b = load(reference), load(other)
    if a.keys() != b.keys():
        return float("inf")
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


def main(args: argparse.Namespace) -> int:
    names = [n.strip() for n in args.strategies.split(",") if n.strip()]
    if len(names) < 2 or len(set(names)) != len(names):
        raise UserError(f"--strategies {args.strategies}: give two or more different presets, e.g. zero3,fsdp")
    overrides = {k: v for k, v in vars(args).items() if k in RunConfig.model_fields}
    base = load_config(getattr(args, "config", None), {**overrides, "strategy": entry(names[0])["strategy"]})
    lr_override = dict(item.split("=", 1) for item in args.test_lr_override)
    out = Path(base.output or "runs/compare")

    # 1. Validate every run and audit its dtypes before any process starts.
    prepared = _plans(base, names)
    from shardlab.recipes.run import prepare  # torch: after the flags and the plans are checked

    prepare(base)  # data, weights folder and resume checks once, before any process starts
    alignment, prepared, plans, before = align_plans(base, names, prepared, args.no_align)
    suspects = cmp.mismatches(plans)
    print(f"compare: {', '.join(names)}; {'; '.join(alignment.notes)}")

    # 2. Run each strategy in its own processes, one after another, from the same resolved config.
    summaries: dict[str, dict] = {}
    for i, name in enumerate(names, 1):
        cfg = prepared[name].config.model_copy(update={"output": str(out / "runs" / _folder(name))})
        if name in lr_override:
            cfg = cfg.model_copy(update={"lr": float(lr_override[name])})
        cfg_file = out / "runs" / f"{_folder(name)}.yaml"
        cfg_file.parent.mkdir(parents=True, exist_ok=True)
        cfg_file.write_text(yaml.safe_dump(cfg.model_dump(), sort_keys=False))
        log_file = out / "runs" / f"{_folder(name)}.log"
        rc = _run_one(f"compare: [{i}/{len(names)}] {name}", cfg_file, log_file)
        if rc != 0:
            tail = log_file.read_text().strip().splitlines()[-1:]
            raise RunFailed(f"compare: the {name} run failed (exit {rc}): {' '.join(tail)}; log in {log_file}")
        summaries[name] = json.loads((out / "runs" / _folder(name) / "summary.json").read_text())

    # 3. Parity, performance, exports, suspects; then the report. float8 against bf16: the wider tolerance; an
    # experiment keeps the precision's (it changes speed or memory, not what is trained). What the entries set
    # differently is what is compared, not a suspect.
    float8 = len({prepared[n].config.float8 for n in names}) > 1
    parity = cmp.loss_parity({n: s["losses"] for n, s in summaries.items()}, alignment.precision, float8)
    val_parity = cmp.val_loss_parity({n: s.get("val_losses", []) for n, s in summaries.items()}, alignment.precision,
                                     float8)
    suspects += cmp.config_differences({n: s["config"] for n, s in summaries.items()}, compared(names))
    metrics = _metrics(names, summaries, parity, plans, alignment, before, suspects, args, out)
    metrics["validation"] = val_parity
    write_json_atomic(out / "metrics.json", metrics)
    _plots(names, summaries, parity, metrics, out)
    from shardlab.recipes.compare_report import write_report

    write_report(out / "report.md", metrics)
    print(f"compare: {metrics['verdict']}")
    if val_parity:
        print(f"compare: {val_parity['verdict']}")
    print(f"compare: throughput {metrics['throughput']['note']}")
    print(f"compare: report {out / 'report.md'}")
    return 0


def _run_one(tag: str, cfg_file: Path, log_file: Path) -> int:
    """`recipe run --config CFG_FILE` with its whole output in LOG_FILE; its progress lines shown, after TAG."""
    from shardlab.recipes.progress import is_progress

    print(f"{tag}: starting (log {log_file})", flush=True)
    with open(log_file, "w") as log, subprocess.Popen(
            [sys.executable, "-m", "shardlab.recipes.cli", "run", "--config", str(cfg_file)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1) as proc:
        for line in proc.stdout:
            log.write(line)
            if is_progress(line):
                print(f"{tag}: {line.strip().removeprefix('shardlab: ')}", flush=True)
    return proc.returncode


def _metrics(names, summaries, parity, plans, alignment, before, suspects, args, out) -> dict[str, Any]:
    ref = names[0]
    # --no-export: no hf/ folders, so no final weights to compare (None in metrics.json, "-" in the report)
    weight_diff = {n: _weights_diff(summaries[ref]["hf_export"], summaries[n]["hf_export"])
                   if summaries[ref].get("hf_export") and summaries[n].get("hf_export") else None for n in names[1:]}
    verdict = cmp.verdict(parity, ref, names[1:], suspects)
    times = {n: cmp.step_times(s["step_s"]) for n, s in summaries.items()}
    speed = cmp.throughput(times, {n: s["tokens_per_s"] for n, s in summaries.items()})
    command = "recipe compare " + " ".join(shlex.quote(a) for a in sys.argv[2:]) if len(sys.argv) > 2 else "recipe compare"
    return {
        "verdict": verdict, "parity": parity.parity, "max_rel_loss_diff": parity.max_rel_loss_diff,
        "max_abs_loss_diff": parity.max_abs_loss_diff, "tolerance": parity.tolerance,
        "first_divergent_step": parity.first_divergent_step, "first_divergent_strategy": parity.first_divergent_strategy,
        "reference": ref, "precision": alignment.precision, "aligned": not args.no_align,
        "alignment_notes": alignment.notes, "mismatches_before_alignment": before, "suspects": suspects,
        "audit": {n: vars(p) for n, p in plans.items()},
        "throughput": vars(speed),
        "strategies": {n: {
            "tokens_per_s": s["tokens_per_s"], "step_time_spread": times[n].spread, "step_time": vars(times[n]),
            "identical_to_reference": parity.identical(n),
            "peak_memory_bytes": s["peak_memory_bytes"], "final_loss": s["losses"][-1], "losses": s["losses"],
            "abs_loss_diff": parity.abs_diff.get(n), "rel_loss_diff": parity.rel_diff.get(n),
            "max_abs_weight_diff": weight_diff[n] if n in weight_diff else 0.0, "mfu": s.get("mfu"), "world_size": s["world_size"],
            "hf_export": s["hf_export"], "device": s.get("device"),
        } for n, s in summaries.items()},
        "command": command, "output": str(out),
    }


def _plots(names, summaries, parity, metrics, out: Path) -> None:
    from shardlab.recipes import plots

    plots.loss_curves({n: summaries[n]["losses"] for n in names}, out / "loss_curves.png")
    plots.loss_diff(parity.rel_diff, names[0], parity.tolerance, out / "loss_diff.png")
    speed = metrics["throughput"]
    plots.throughput_memory(names, [metrics["strategies"][n]["tokens_per_s"] for n in names],
                            [metrics["strategies"][n]["step_time"] for n in names],
                            [max(summaries[n]["peak_memory_bytes"]) / 2**30 for n in names],
                            None if speed["ranked"] else speed["note"], out / "throughput_memory.png")
