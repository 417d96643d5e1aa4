"""Measured peak memory vs shardlab's estimate, on one GPU, for every preset under today's defaults and --kernels torch.

Each point is one real `recipe run --max-steps 3 --no-export` of a (model, preset, kernels, activation
checkpointing, micro-batch). Several run side by side on the one GPU: each process's
torch.cuda.max_memory_allocated is its own, and a point is started only while the estimates of the running
ones (x1.25, + 2 GiB each for the CUDA context and the allocator's slack) fit the device, and their CPU
estimates 80% of the host. Every row keeps the
run's whole resolved config (summary.json's `config`) beside its numbers, so tests/core/test_memory.py checks
each point against the estimate for *its* config, and finds whether the current defaults were measured at all.

Usage (GPU machine, repo root, shardlab importable):
    python3 benchmarks/gpu_memory.py --out OUT [--lanes 6] [--budget-s 540] [--grid default] [--jobs M:P:K:ac|noac:MB[:LEVER],...]
        [--snapshot M:P:K:ac|noac:MB,...]
Writes OUT/memory.json and OUT/memory.md; --snapshot points also dump the allocator's history and
OUT/snapshot-<tag>.json names the tensors live at the peak (benchmarks/memory_snapshot.py).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

PRESETS = ["fsdp", "zero3", "zero2", "ddp", "zero3_offload", "zero3_offload_all", "zero2_offload", "fsdp_offload"]
GiB = 2**30
# (model, micro-batches, presets): the issue's grid. The 7B shape fits one H200 only with checkpointing and sharding/offload.
SHAPES = [("llama-1b", (4, 8), PRESETS, (True, False)), ("llama-3.2-3b", (2, 4), PRESETS, (True, False)),
          ("llama-2-7b", (1, 2), ["fsdp", "zero3_offload", "zero3_offload_all"], (True,))]


def grid() -> list[tuple]:
    """GPU defaults first (what users run), then --kernels torch; within each, smaller shapes first."""
    jobs = []
    for kernels in ("liger", "torch"):
        for model, mbs, presets, acs in SHAPES:
            for ac in acs:
                for mb in mbs:
                    jobs += [(model, p, kernels, ac, mb, "") for p in presets]
    return jobs


# A point's optional sixth field, a lever's flags: float8 (--float8), compile (--compile), fused-adds (--fused-adds),
# ratio0.5 (--offload-ratio 0.5), exp.lean-config.fused-step (--experiments lean-config,fused-step).
def extra_flags(extra: str) -> list[str]:
    if not extra:
        return []
    if extra in ("float8", "compile", "fused-adds"):
        return [f"--{extra}"]
    if extra.startswith("ratio"):
        return ["--offload-ratio", extra.removeprefix("ratio")]
    if extra.startswith("exp."):
        return ["--experiments", ",".join(extra.split(".")[1:])]
    raise SystemExit(f"unknown point option {extra!r}: float8, compile, fused-adds, ratioR or exp.NAME[.NAME]")


def lever_fields(extra: str) -> dict:
    """The RunConfig fields of a point's lever (see extra_flags)."""
    if not extra:
        return {}
    if extra == "float8":
        return {"float8": True}
    if extra == "compile":
        return {"compile": True}
    if extra == "fused-adds":
        return {"fused_adds": True}
    if extra.startswith("exp."):
        return {"experiments": extra.split(".")[1:]}
    return {"offload_ratio": float(extra.removeprefix("ratio"))}


def tag(job: tuple) -> str:
    model, preset, kernels, ac, mb, extra = job
    return f"{model}-{preset}-{kernels}-{'ac' if ac else 'noac'}-mb{mb}" + (f"-{extra}" if extra else "")


def parse(spec: str) -> list[tuple]:
    """MODEL:PRESET:KERNELS:ac|noac:MICRO_BATCH[:float8|:compile|:ratioR|:exp.NAME...], comma-separated."""
    out = []
    for j in filter(None, spec.split(",")):
        m, p, k, ac, mb, *extra = j.split(":")
        out.append((m, p, k, ac == "ac", int(mb), extra[0] if extra else ""))
    return out


def command(job: tuple, out: Path) -> list[str]:
    model, preset, kernels, ac, mb, extra = job
    return [sys.executable, "-m", "shardlab.recipes.cli", "run", "--model", model, "--strategy", preset,
            "--kernels", kernels, "--micro-batch-size", str(mb), "--max-steps", "3", "--no-export", "--metrics", "none",
            "--output", str(out / tag(job))] + (["--activation-checkpointing"] if ac else []) + extra_flags(extra)


def estimate_bytes(job: tuple) -> tuple[int, int]:
    """The estimate shardlab gives this point now, (GPU bytes, CPU bytes) (in this process: no GPU needed)."""
    from shardlab.core.config import RunConfig
    from shardlab.recipes.resolve import resolve_run

    model, preset, kernels, ac, mb, extra = job
    lever = lever_fields(extra)
    cfg = RunConfig(model=model, strategy=preset, kernels=kernels, micro_batch_size=mb, activation_checkpointing=ac,
                    accelerator="gpu", devices=1, gpu_memory_gib=141, max_steps=3, export=False, **lever)
    run = resolve_run(cfg, for_run=False)
    return (run.estimate["gpu_bytes"], run.estimate["cpu_bytes"]) if run.estimate else (40 * GiB, 40 * GiB)


def run_one(job: tuple, out: Path, port: int, snapshot: bool, timeout: float) -> dict:
    cmd = command(job, out)
    env = {**os.environ, "MASTER_PORT": str(port)}
    if snapshot:
        env["SHARDLAB_MEMORY_SNAPSHOT"] = str(out / f"{tag(job)}.pickle")
    t0 = time.time()
    with open(out / f"{tag(job)}.log", "w") as log:
        try:
            rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = 124
    model, preset, kernels, ac, mb, extra = job
    row = {"model": model, "preset": preset, "kernels": kernels, "activation_checkpointing": ac, "micro_batch_size": mb,
           "lever": extra or None,
           "rc": rc, "command": "recipe " + " ".join(cmd[3:]), "wall_s": round(time.time() - t0, 1)}
    summary = out / tag(job) / "summary.json"
    if rc == 0 and summary.exists():
        s = json.loads(summary.read_text())
        row.update(measured_bytes=s["peak_memory_bytes"][0], peak_cpu_bytes=(s.get("peak_cpu_bytes") or [None])[0],
                   requested_bytes=(s.get("peak_requested_bytes") or [None])[0],
                   estimate_at_run=s["memory_estimate"], config=s["config"], tokens_per_s=s["tokens_per_s"])
        row["error"] = round(row["estimate_at_run"]["gpu_bytes"] / row["measured_bytes"] - 1, 4)
    else:
        row["log_tail"] = (out / f"{tag(job)}.log").read_text()[-600:]
    if snapshot and (out / f"{tag(job)}.pickle").exists():
        from benchmarks.memory_snapshot import live_at_peak

        named = live_at_peak(out / f"{tag(job)}.pickle", layers=None)
        (out / f"snapshot-{tag(job)}.json").write_text(json.dumps(named, indent=1))
        os.remove(out / f"{tag(job)}.pickle")
    print(json.dumps({k: v for k, v in row.items() if k not in ("config", "estimate_at_run", "command", "log_tail")}), flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--lanes", type=int, default=6)
    ap.add_argument("--budget-s", type=float, default=540, help="start no point after this; stop running ones at +60 s")
    ap.add_argument("--capacity-gib", type=float, default=132)
    ap.add_argument("--jobs", help="only these points: MODEL:PRESET:KERNELS:ac|noac:MICRO_BATCH, comma-separated")
    ap.add_argument("--skip", default="", help="points not to run (measured in an earlier call), same form")
    ap.add_argument("--skip-from", nargs="*", default=[], help="memory.json files of earlier calls: skip their points "
                    "(all but those stopped at their call's time budget, rc 124)")
    ap.add_argument("--host-fraction", type=float, default=0.8, help="of the host's memory, what the points may hold")
    ap.add_argument("--ready", default="", help="MODEL:PATH,...: take MODEL's points only once PATH exists (weights built elsewhere)")
    ap.add_argument("--snapshot", default="", help="points that also dump and name the allocator's live tensors at the "
                    "peak (without --jobs: only these)")
    ap.add_argument("--offload-lanes", type=int, default=2, help="offload points at a time (they share the host's CPUs)")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    snapshots = set(parse(a.snapshot))
    jobs = parse(a.jobs) if a.jobs else [] if snapshots else grid()
    done = {tag(j) for j in parse(a.skip)}
    for f in a.skip_from:
        if os.path.exists(f):
            done |= {tag((r["model"], r["preset"], r["kernels"], r["activation_checkpointing"], r["micro_batch_size"],
                          r.get("lever") or "")) for r in json.loads(Path(f).read_text())["rows"] if r["rc"] != 124}
    jobs = list(snapshots) + [j for j in jobs if j not in snapshots and tag(j) not in done]
    estimates = {j: estimate_bytes(j) for j in jobs}
    need = {j: int(estimates[j][0] * 1.25) + 2 * GiB for j in jobs}
    # host memory: the CPU estimate of each point (+ loading), kept under 80% of the host's (two 3B offload points
    # side by side were killed by the kernel on the 125 GiB H200 host)
    host = {j: int(estimates[j][1] * 1.1) + 4 * GiB for j in jobs}
    host_total = int(a.host_fraction * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    too_big = [j for j in jobs if need[j] > a.capacity_gib * GiB * 1.3]  # beyond even the estimate's known slack
    jobs = [j for j in jobs if j not in too_big]
    rows: list[dict] = []
    lock, cond = threading.Lock(), threading.Condition()
    state = {"used": 0, "offload": 0, "running": 0, "host": 0}
    ready = dict(r.split(":", 1) for r in filter(None, a.ready.split(",")))
    t_start = time.time()
    deadline = t_start + a.budget_s

    def take():
        """The next point that fits beside the running ones (offload points: --offload-lanes at a time, they share the CPUs)."""
        with cond:
            while True:
                if time.time() > deadline or not jobs:
                    return None
                for j in jobs:
                    if j[0] in ready and not os.path.exists(ready[j[0]]):
                        continue
                    off = "offload" in j[1]
                    big = min(need[j], int(a.capacity_gib * GiB))
                    cpu = min(host[j], host_total)  # a point that needs the whole host runs alone
                    if state["used"] + big <= a.capacity_gib * GiB and state["host"] + cpu <= host_total \
                            and (not off or state["offload"] < a.offload_lanes):
                        jobs.remove(j)
                        state["used"] += big
                        state["host"] += cpu
                        state["offload"] += off
                        state["running"] += 1
                        return j, big, off, cpu
                cond.wait(timeout=2)

    def lane(i: int) -> None:
        while True:
            got = take()
            if got is None:
                return
            j, big, off, cpu = got
            row = run_one(j, out, 29500 + 10 * i, j in snapshots, max(30.0, deadline + 60 - time.time()))
            with cond:
                rows.append(row)
                state["used"] -= big
                state["offload"] -= off
                state["running"] -= 1
                state["host"] -= cpu
                cond.notify_all()

    threads = [threading.Thread(target=lane, args=(i,)) for i in range(a.lanes)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    import torch

    meta = {"date": datetime.date.today().isoformat(), "device": torch.cuda.get_device_name() + " (one GPU)",
            "versions": _versions(), "script": "benchmarks/gpu_memory.py " + " ".join(sys.argv[1:]),
            "not_run": [tag(j) for j in jobs], "not_run_estimate_too_large": [tag(j) for j in too_big]}
    earlier = json.loads((out / "memory.json").read_text()) if (out / "memory.json").exists() else None
    if earlier:  # an earlier run into this folder: its rows kept but for the points run again
        again = {r["command"] for r in rows}
        rows = [r for r in earlier["rows"] if r["command"] not in again] + rows
        meta["script"] = f"{earlier['script']}; then {meta['script']}"
    (out / "memory.json").write_text(json.dumps({**meta, "rows": rows}, indent=1))
    lines = ["| model | preset | kernels | act. ckpt | micro-batch | measured GiB | estimate at run GiB | error | CPU peak GiB |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["model"], r["kernels"], PRESETS.index(r["preset"]), r["activation_checkpointing"], r["micro_batch_size"])):
        head = f"| {r['model']} | {r['preset']} | {r['kernels']} | {'on' if r['activation_checkpointing'] else 'off'} | {r['micro_batch_size']} |"
        if "measured_bytes" in r:
            cpu = f"{r['peak_cpu_bytes'] / GiB:.1f}" if r.get("peak_cpu_bytes") else ""
            lines.append(f"{head} {r['measured_bytes'] / GiB:.2f} | {r['estimate_at_run']['gpu_bytes'] / GiB:.2f} | {r['error']:+.1%} | {cpu} |")
        else:
            lines.append(f"{head} failed (rc {r['rc']}) | | | |")
    (out / "memory.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"not run: {len(meta['not_run'])}; total {time.time() - t_start:.0f} s")


def _versions() -> dict:
    import importlib.metadata as md

    out = {}
    for p in ("torch", "transformers", "lightning", "deepspeed", "liger-kernel", "accelerate"):
        try:
            out[p] = md.version(p)
        except md.PackageNotFoundError:
            out[p] = None
    return out


if __name__ == "__main__":
    main()
