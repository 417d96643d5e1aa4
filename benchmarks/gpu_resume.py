"""Issue 19 on the GPU: a run checkpointed under one strategy and resumed under another, against its own
uninterrupted run, plus `recipe export` of the same checkpoint.

For each SOURCE>TARGET pair: `recipe run --strategy SOURCE --max-steps S/2 --checkpoint-every S/2` writes the
checkpoint, `recipe run --strategy SOURCE --max-steps S` is the uninterrupted run (no checkpoint: two of llama-1b's,
28 GiB each with the portable copy, would fill the GPU machine's disk), then `recipe run --resume <the checkpoint>
--strategy TARGET --max-steps S`; the resumed run's losses of steps S/2+1..S are checked against the uninterrupted ones with `recipe compare`'s tolerance for the
precision (core/compare.py). Times: the checkpoint's native and portable writes (its meta.json), the resumed
run's portable load (summary.json), and the wall time of `recipe export` on the checkpoint.

    python3 benchmarks/gpu_resume.py --out OUT [--pairs zero3>fsdp] [--model llama-1b] [--steps 30] [--micro-batch 4]
"""
from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import time
from pathlib import Path


def recipe(*args: str, log: Path) -> tuple[int, float]:
    t0 = time.time()
    with open(log, "w") as f:
        rc = subprocess.call([sys.executable, "-m", "shardlab.recipes.cli", *args], stdout=f, stderr=subprocess.STDOUT)
    return rc, round(time.time() - t0, 1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--pairs", default="zero3>fsdp")
    ap.add_argument("--model", default="llama-1b")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--micro-batch", type=int, default=4)
    a = ap.parse_args()
    from shardlab.core.compare import loss_parity

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    half = a.steps // 2
    common = ["--model", a.model, "--micro-batch-size", str(a.micro_batch), "--metrics", "none", "--no-export"]
    rows, sources = [], {}
    for pair in a.pairs.split(","):
        src, dst = pair.split(">")
        row: dict = {"source": src, "target": dst, "model": a.model, "steps": a.steps, "checkpoint_step": half}
        if src not in sources:  # the checkpoint (a run to S/2) and the uninterrupted run to S (no checkpoints: disk)
            sources[src] = (recipe("run", "--strategy", src, *common, "--max-steps", str(half), "--checkpoint-every",
                                   str(half), "--output", str(out / src), log=out / f"{src}.log"),
                            recipe("run", "--strategy", src, *common, "--max-steps", str(a.steps), "--output",
                                   str(out / f"{src}-uninterrupted"), log=out / f"{src}-uninterrupted.log"))
        (rc, wall), (rc_u, wall_u) = sources[src]
        row.update(source_rc=rc, source_wall_s=wall, uninterrupted_rc=rc_u, uninterrupted_wall_s=wall_u)
        ckpt = out / src / "checkpoints" / f"step-{half:06d}"
        if rc != 0 or rc_u != 0 or not ckpt.is_dir():
            rows.append({**row, "error": (out / f"{src}.log").read_text()[-800:]})
            continue
        meta = json.loads((ckpt / "meta.json").read_text())
        row["write_seconds"] = meta.get("write_seconds")
        row["checkpoint_gib"] = round(sum(f.stat().st_size for f in ckpt.rglob("*") if f.is_file()) / 2**30, 2)
        row["portable_gib"] = round(sum(f.stat().st_size for f in (ckpt / "portable").rglob("*") if f.is_file()) / 2**30, 2)
        tag = f"{src}-to-{dst}"
        rc, wall = recipe("run", "--resume", str(ckpt), "--strategy", dst, *common, "--max-steps", str(a.steps),
                          "--checkpoint-every", "0",
                          "--output", str(out / tag), log=out / f"{tag}.log")
        row["resume_rc"], row["resume_wall_s"] = rc, wall
        if rc != 0:
            rows.append({**row, "error": (out / f"{tag}.log").read_text()[-800:]})
            continue
        a_sum = json.loads((out / f"{src}-uninterrupted" / "summary.json").read_text())
        b_sum = json.loads((out / tag / "summary.json").read_text())
        ref, got = a_sum["losses"][half:a.steps], b_sum["losses"][-(a.steps - half):]
        parity = loss_parity({src: ref, f"{src}>{dst}": got}, a_sum["precision"])
        row.update(precision=a_sum["precision"], tolerance=parity.tolerance, max_rel_loss_diff=parity.max_rel_loss_diff,
                   parity=parity.parity, resumed_through=b_sum.get("resumed_through"),
                   portable_load_s=b_sum.get("portable_load_s"), losses_uninterrupted=ref, losses_resumed=got,
                   tokens_per_s={src: a_sum["tokens_per_s"], dst: b_sum["tokens_per_s"]},
                   config_source=a_sum["config"], config_resumed=b_sum["config"], device=a_sum["device"])
        exp = out / f"export-{src}"
        if not exp.exists():
            rc, wall = recipe("export", str(ckpt), "--output", str(exp), log=out / f"export-{src}.log")
            row["export_rc"], row["export_wall_s"] = rc, wall
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if not k.startswith(("losses", "config"))}), flush=True)
    (out / "resume.json").write_text(json.dumps({"date": datetime.date.today().isoformat(),
                                                 "script": "benchmarks/gpu_resume.py " + " ".join(sys.argv[1:]),
                                                 "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
