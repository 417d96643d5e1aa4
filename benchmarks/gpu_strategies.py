"""shardlab's presets against raw Lightning on one GPU, alternating in the same call.

For each strategy: the raw-Lightning anchor (benchmarks/raw_anchor.py), then `recipe run` with the same
shape (llama-1b, seq 2048, micro-batch 8, bf16-mixed, AdamW), then (with --rounds 2) the same two in
the opposite order, so that drift of the machine over the call falls on both sides. Each side's
figure is the median step time of STEPS steps after 5 warm-up steps; the ratio is shardlab / raw.

Usage (GPU machine, repo root, shardlab importable):
    python3 benchmarks/gpu_strategies.py --out OUT [--strategies ddp,fsdp,...] [--rounds 1] [--steps 20]
    python3 benchmarks/gpu_strategies.py --out OUT --no-raw --tag compile --extra "--compile"   # a lever
    python3 benchmarks/gpu_strategies.py --out OUT --no-raw --warmup 2 --steps 5 --grad-accum 8 --strategies zero3_offload
Writes OUT/gpu_strategies.json (rewritten after every run, so a cut-off call keeps what it measured)
and OUT/gpu_strategies.md.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WARMUP = 5
# Raw Lightning has no FSDP2 strategy with this recipe's wrapping; its FSDPStrategy (FSDP1, decoder-layer
# wrap) is the anchor for shardlab's fsdp (FSDP2): the ratio is then also "FSDP2 vs FSDP1".
RAW_NAME = {"zero2_offload": None, "zero3_offload_all": None, "fsdp_offload": None}


def versions() -> dict:
    import lightning
    import torch
    import transformers

    try:
        import deepspeed
        ds = deepspeed.__version__
    except ImportError:
        ds = None
    return {"torch": torch.__version__, "lightning": lightning.__version__, "transformers": transformers.__version__,
            "deepspeed": ds, "cuda": torch.version.cuda}


def run_raw(out: Path, name: str, mb: int, steps: int) -> dict:
    env = {**os.environ, "MB": str(mb), "SEQ": "2048", "STEPS": str(steps)}
    cmd = [sys.executable, str(HERE / "raw_anchor.py"), name]
    log = out / f"raw-{name}-{time.time_ns()}.log"
    t0 = time.perf_counter()
    with open(log, "w") as f:
        rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
    wall = round(time.perf_counter() - t0, 1)
    lines = [l for l in log.read_text().splitlines() if l.startswith("{")]
    if rc != 0 or not lines:
        return {"rc": rc, "error": log.read_text()[-1500:]}
    r = json.loads(lines[-1])
    return {"rc": 0, "tokens_per_s": r["tokens_per_s"], "mfu": r["mfu_vs_989"],
            "peak_memory_bytes": int(r["peak_mem_gib"] * 2**30), "losses": r["losses"],
            "wall_s": wall, "command": f"MB={mb} SEQ=2048 STEPS={steps} python3 benchmarks/raw_anchor.py {name}"}


# The environment that changes a run, written into its row's command (it is part of what ran).
COMMAND_ENV = ("SHARDLAB_AB", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF",
               "SHARDLAB_ACT_BUDGET")  # the last: read by results/2026-12-06d-liger-compile/act_budget_sitecustomize.py


def command_env() -> str:
    """The COMMAND_ENV variables set here, as a command's prefix ("NAME=value ...")."""
    return "".join(f"{k}={os.environ[k]} " for k in COMMAND_ENV if os.environ.get(k))


def run_shardlab(out: Path, name: str, mb: int, steps: int, extra: list[str], tag: str, warmup: int = WARMUP,
                 grad_accum: int = 1, model: str = "llama-1b") -> dict:
    folder = out / f"{tag}-{name}-{time.time_ns()}"
    cmd = [sys.executable, "-m", "shardlab.recipes.cli", "run", "--strategy", name, "--model", model,
           "--precision", "bf16-mixed", "--micro-batch-size", str(mb), "--seq-len", "2048", "--grad-accum", str(grad_accum),
           "--max-steps", str(steps + warmup), "--no-export", "--metrics", "none", "--output", str(folder), *extra]
    t0 = time.perf_counter()
    log = folder.parent / f"{folder.name}.log"  # not with_suffix: a tag such as ratio0.25 has a dot of its own
    with open(log, "w") as f:
        rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT)
    wall = round(time.perf_counter() - t0, 1)
    if rc != 0:
        return {"rc": rc, "error": log.read_text()[-1500:]}
    s = json.loads((folder / "summary.json").read_text())
    # tokens of one optimizer step (all its micro-batches) / the median optimizer-step time after warm-up
    step = statistics.median(s["step_s"][warmup:])
    tokens_per_s = mb * 2048 * grad_accum / step
    return {"rc": 0, "tokens_per_s": round(tokens_per_s), "mfu": s["mfu"] and s["mfu"] * tokens_per_s / s["tokens_per_s"],
            "peak_memory_bytes": max(s["peak_memory_bytes"]),
            "peak_requested_bytes": max(s.get("peak_requested_bytes") or [0]) or None,
            "losses": [round(x, 4) for x in s["losses"][:4]],
            "median_step_s": step, "step_s": [round(x, 3) for x in s["step_s"]], "wall_s": wall,
            "estimate_gpu_bytes": (s.get("memory_estimate") or {}).get("gpu_bytes"), "config": s["config"],
            "lever_ab": s.get("lever_ab"),  # SHARDLAB_AB set: the lever off and on within this run (recipes/lever_ab.py)
            "command": command_env() + "recipe " + " ".join(cmd[3:]).replace(str(folder), "OUT")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--strategies", default="ddp,fsdp,zero2,zero3,zero3_offload")
    ap.add_argument("--rounds", type=int, default=1, help="2: raw, shardlab, shardlab, raw (ABBA)")
    ap.add_argument("--steps", type=int, default=20, help="timed steps after 5 warm-up steps")
    ap.add_argument("--micro-batch-size", type=int, default=8)
    ap.add_argument("--model", default="llama-1b", help="shardlab's --model (the raw anchor is always llama-1b)")
    ap.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step (shardlab side only)")
    ap.add_argument("--warmup", type=int, default=WARMUP, help="untimed optimizer steps before the timed ones")
    ap.add_argument("--extra", default="", help="more flags for recipe run (a lever)")
    ap.add_argument("--tag", default="default", help="name of this setting in the results")
    ap.add_argument("--no-raw", action="store_true", help="shardlab only (levers: compare with a shardlab row)")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    results_file = out / "gpu_strategies.json"
    import torch

    doc = json.loads(results_file.read_text()) if results_file.exists() else {
        "date": datetime.date.today().isoformat(), "device": torch.cuda.get_device_name(), "versions": versions(),
        "peak_flops": 989e12, "rows": []}

    def save(row: dict) -> None:
        doc["rows"] = [r for r in doc["rows"] if (r["strategy"], r["tag"]) != (row["strategy"], row["tag"])] + [row]
        results_file.write_text(json.dumps(doc, indent=2))
        print(json.dumps({k: v for k, v in row.items() if k not in ("runs",)})[:600], flush=True)

    for name in a.strategies.split(","):
        # the anchor has no gradient accumulation and a fixed warm-up of 5: other settings run shardlab alone
        matched = a.grad_accum == 1 and a.warmup == WARMUP and a.model == "llama-1b"
        raw_name = None if a.no_raw or not matched else RAW_NAME.get(name, name)
        shard, raw = [], []
        for r in range(a.rounds):
            order = ["raw", "shardlab"] if r % 2 == 0 else ["shardlab", "raw"]
            for side in order:
                if side == "raw" and raw_name:
                    raw.append(run_raw(out, raw_name, a.micro_batch_size, a.steps))
                elif side == "shardlab":
                    shard.append(run_shardlab(out, name, a.micro_batch_size, a.steps, a.extra.split(), a.tag, a.warmup,
                                              a.grad_accum, a.model))
        ok_s, ok_r = [x for x in shard if x["rc"] == 0], [x for x in raw if x["rc"] == 0]
        row = {"strategy": name, "tag": a.tag, "model": a.model, "extra": a.extra, "micro_batch_size": a.micro_batch_size,
               "grad_accum": a.grad_accum, "timed_steps": a.steps, "warmup_steps": a.warmup, "runs": shard + raw}
        # MFU is proportional to tokens/s: the row's is that of its median tokens/s
        mfu_at = lambda runs, tps: runs[0]["mfu"] and runs[0]["mfu"] * tps / runs[0]["tokens_per_s"]
        if ok_s:
            tps = round(statistics.median(x["tokens_per_s"] for x in ok_s))
            row.update(tokens_per_s=tps, mfu=mfu_at(ok_s, tps),
                       peak_memory_bytes=ok_s[0]["peak_memory_bytes"], losses=ok_s[0]["losses"], command=ok_s[0]["command"],
                       estimate_gpu_bytes=ok_s[0]["estimate_gpu_bytes"], config=ok_s[0]["config"])
        if ok_r:
            tps = round(statistics.median(x["tokens_per_s"] for x in ok_r))
            row.update(raw_tokens_per_s=tps, raw_mfu=mfu_at(ok_r, tps),
                       raw_peak_memory_bytes=ok_r[0]["peak_memory_bytes"], raw_losses=ok_r[0]["losses"],
                       raw_command=ok_r[0]["command"])
        if ok_s and ok_r:
            row["ratio"] = round(row["tokens_per_s"] / row["raw_tokens_per_s"], 3)
        save(row)

    lines = [f"date {doc['date']}, device {doc['device']}, versions {doc['versions']}", "",
             "| model | strategy | setting | tokens/s | raw Lightning tokens/s | ratio | MFU | peak GiB | estimate GiB | raw peak GiB |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        gib = lambda k: f"{r[k] / 2**30:.1f}" if r.get(k) else "-"
        lines.append(f"| {r.get('model', 'llama-1b')} | {r['strategy']} | {r['tag']} | {r.get('tokens_per_s', 'failed')} | "
                     f"{r.get('raw_tokens_per_s', '-')} | {r.get('ratio', '-')} | {r['mfu']:.1%} | {gib('peak_memory_bytes')} | "
                     f"{gib('estimate_gpu_bytes')} | {gib('raw_peak_memory_bytes')} |"
                     if "mfu" in r else f"| {r.get('model', 'llama-1b')} | {r['strategy']} | {r['tag']} | failed | | | | | | |")
    (out / "gpu_strategies.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
