"""Run `recipe run` for each preset on the GPU and tabulate tokens/s, MFU and peak memory.

Usage (on the GPU machine, from the repo root, shardlab importable):
    python3 benchmarks/gpu_presets.py --out OUT [--presets ddp,zero2,...] [--steps 20]
Writes OUT/presets.json and OUT/presets.md (a Markdown table with date, device, versions and commands).
"""
from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import time
from pathlib import Path

ALL = "ddp,zero2,zero2_offload,zero3,zero3_offload,zero3_offload_all,fsdp,fsdp_offload"
# Raw Lightning on the same model and GPU (../shared/gpu/README.md, anchor.py, measured 2026-12-02).
ANCHOR = {"ddp": 47049, "fsdp": 51633, "zero2": 46066, "zero3": 40846, "zero3_offload": 7360}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--presets", default=ALL)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--extra", default="", help="more flags for recipe run")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in a.presets.split(","):
        cmd = [sys.executable, "-m", "shardlab.recipes.cli", "run", "--strategy", name, "--model", "llama-1b",
               "--precision", "bf16-mixed", "--micro-batch-size", "8", "--seq-len", "2048",
               "--max-steps", str(a.steps), "--output", str(out / name), *a.extra.split()]
        t0 = time.time()
        with open(out / f"{name}.log", "w") as log:
            rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT)
        row = {"strategy": name, "rc": rc, "command": "recipe " + " ".join(cmd[3:]), "total_s": round(time.time() - t0, 1)}
        if rc == 0:
            s = json.loads((out / name / "summary.json").read_text())
            row.update(tokens_per_s=round(s["tokens_per_s"]), mfu=s["mfu"], peak_gib=round(max(s["peak_memory_bytes"]) / 2**30, 1),
                       first_losses=[round(x, 4) for x in s["losses"][:3]], last_loss=round(s["losses"][-1], 4),
                       export_rel_diff=s["export_check"]["relative"], raw_lightning=ANCHOR.get(name), device=s["device"])
        else:
            row["error"] = (out / f"{name}.log").read_text()[-2000:]
        rows.append(row)
        print(json.dumps(row)[:400], flush=True)
    import lightning, torch, transformers
    try:
        import deepspeed
        ds = deepspeed.__version__
    except ImportError:
        ds = None
    meta = {"date": datetime.date.today().isoformat(), "device": torch.cuda.get_device_name(),
            "versions": {"torch": torch.__version__, "lightning": lightning.__version__,
                         "transformers": transformers.__version__, "deepspeed": ds}}
    (out / "presets.json").write_text(json.dumps({**meta, "rows": rows}, indent=2))
    lines = [f"date {meta['date']}, device {meta['device']}, versions {meta['versions']}", "",
             "| preset | tokens/s | MFU | peak GiB | raw Lightning tokens/s | loss step 1 -> last | export rel. diff |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["rc"] == 0:
            lines.append(f"| {r['strategy']} | {r['tokens_per_s']:,} | {r['mfu']:.1%} | {r['peak_gib']} | "
                         f"{r['raw_lightning'] or '-'} | {r['first_losses'][0]} -> {r['last_loss']} | {r['export_rel_diff']:.2g} |")
        else:
            lines.append(f"| {r['strategy']} | failed (rc {r['rc']}) | | | | | |")
    (out / "presets.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
