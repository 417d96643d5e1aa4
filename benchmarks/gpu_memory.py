"""Measured peak GPU memory vs shardlab's estimate, `llama-1b` on one GPU.

Runs `recipe run --no-export --max-steps 3` for each (preset, micro-batch, activation checkpointing) in
a few lanes of processes side by side on the one GPU (each process's torch.cuda.max_memory_allocated
is its own; lanes only share the device's capacity, which they stay well under).
Usage (GPU machine, repo root, shardlab importable):
    python3 benchmarks/gpu_memory.py --out OUT [--lanes 3] [--budget-s 400] [--jobs zero3:4:ac,ddp:8:noac,...]
Writes OUT/memory.json and OUT/memory.md.
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

PRESETS = ["ddp", "zero2", "zero3", "fsdp", "zero2_offload", "zero3_offload", "zero3_offload_all", "fsdp_offload"]
SETTINGS = [(4, False), (8, True), (4, True)]  # (micro-batch, activation checkpointing); (8, off) is in the foundation runs


def run_one(out: Path, name: str, mb: int, ac: bool, port: int) -> dict:
    tag = f"{name}-mb{mb}-{'ac' if ac else 'noac'}"
    cmd = [sys.executable, "-m", "shardlab.recipes.cli", "run", "--strategy", name, "--model", "llama-1b",
           "--precision", "bf16-mixed", "--micro-batch-size", str(mb), "--seq-len", "2048", "--max-steps", "3",
           "--no-export", "--output", str(out / tag)] + (["--activation-checkpointing"] if ac else [])
    t0 = time.time()
    with open(out / f"{tag}.log", "w") as log:
        rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "MASTER_PORT": str(port)})
    row = {"preset": name, "micro_batch_size": mb, "activation_checkpointing": ac, "rc": rc,
           "command": "recipe " + " ".join(cmd[3:]), "wall_s": round(time.time() - t0, 1)}
    if rc == 0:
        s = json.loads((out / tag / "summary.json").read_text())
        row.update(measured_bytes=s["peak_memory_bytes"][0], estimate_bytes=s["memory_estimate"]["gpu_bytes"],
                   parts=s["memory_estimate"]["parts"])
        row["error"] = row["estimate_bytes"] / row["measured_bytes"] - 1
    print(json.dumps({k: v for k, v in row.items() if k not in ("parts", "command")}), flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--lanes", type=int, default=3)
    ap.add_argument("--budget-s", type=float, default=400)
    ap.add_argument("--jobs", help="only these points: PRESET:MICRO_BATCH:ac|noac, comma-separated")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    jobs = [(n, mb, ac) for mb, ac in SETTINGS for n in PRESETS]
    if a.jobs:
        jobs = [(p, int(mb), ac == "ac") for p, mb, ac in (j.split(":") for j in a.jobs.split(","))]
    rows: list[dict] = []
    lock, deadline = threading.Lock(), time.time() + a.budget_s

    def lane(i: int) -> None:
        while time.time() < deadline:
            with lock:
                if not jobs:
                    return
                job = jobs.pop(0)
            row = run_one(out, *job, port=29500 + 10 * i)
            with lock:
                rows.append(row)

    threads = [threading.Thread(target=lane, args=(i,)) for i in range(a.lanes)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    import torch

    meta = {"date": datetime.date.today().isoformat(), "device": torch.cuda.get_device_name(),
            "torch": torch.__version__, "not_run": [list(j) for j in jobs]}
    (out / "memory.json").write_text(json.dumps({**meta, "rows": rows}, indent=2))
    lines = ["| preset | micro-batch | act. ckpt | measured GiB | estimate GiB | error |", "|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (PRESETS.index(r["preset"]), r["micro_batch_size"], r["activation_checkpointing"])):
        if r["rc"] == 0:
            lines.append(f"| {r['preset']} | {r['micro_batch_size']} | {'on' if r['activation_checkpointing'] else 'off'} | "
                         f"{r['measured_bytes'] / 2**30:.1f} | {r['estimate_bytes'] / 2**30:.1f} | {r['error']:+.1%} |")
        else:
            lines.append(f"| {r['preset']} | {r['micro_batch_size']} | {'on' if r['activation_checkpointing'] else 'off'} | failed (rc {r['rc']}) | | |")
    (out / "memory.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print("not run:", meta["not_run"])


if __name__ == "__main__":
    main()
