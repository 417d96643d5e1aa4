"""Which tensors are live at a run's GPU memory peak, from the allocator's history (SHARDLAB_MEMORY_SNAPSHOT).

The history replays every allocation and free since training started (recipes/metrics.py MemorySnapshot);
at the moment the allocated bytes peak, the live blocks are grouped by where they were allocated: the
innermost frame in model, kernel, optimizer or backend code.
Usage: python3 benchmarks/memory_snapshot.py SNAPSHOT.pickle
"""
from __future__ import annotations

import json
import pickle
import sys
from collections import defaultdict
from pathlib import Path

INTERESTING = ("liger_kernel/", "transformers/models/", "transformers/loss", "shardlab/", "deepspeed/",
               "torch/distributed/fsdp", "torch/optim", "torch/utils/checkpoint", "torch/nn/functional",
               "torch/autograd", "lightning/")


def _site(frames: list[dict]) -> str:
    for f in frames:
        name = f.get("filename", "")
        if any(k in name for k in INTERESTING):
            short = name.split("site-packages/")[-1]
            return f"{short}:{f.get('line')} {f.get('name')}"
    return (f"{frames[0].get('filename', '?').split('/')[-1]}:{frames[0].get('line')} {frames[0].get('name')}"
            if frames else "unknown")


def live_at_peak(path, layers=None, top: int = 40) -> dict:
    snap = pickle.loads(Path(path).read_bytes())
    baseline = snap.get("shardlab_baseline_bytes", 0)
    trace = next((t for t in snap["device_traces"] if t), [])
    allocated, peak, peak_at = baseline, baseline, -1
    for i, ev in enumerate(trace):  # 1. when the allocated bytes peak
        if ev["action"] == "alloc":
            allocated += ev["size"]
            if allocated > peak:
                peak, peak_at = allocated, i
        elif ev["action"] == "free_requested":
            allocated -= ev["size"]
    live: dict[int, tuple[int, str]] = {}
    for ev in trace[:peak_at + 1]:  # 2. what is live then, and where it was allocated
        if ev["action"] == "alloc":
            live[ev["addr"]] = (ev["size"], _site(ev.get("frames") or []))
        elif ev["action"] == "free_requested":
            live.pop(ev["addr"], None)
    peak_live = live
    groups: dict[str, int] = defaultdict(int)
    for size, site in (peak_live or {}).values():
        groups[site] += size
    ranked = sorted(groups.items(), key=lambda kv: -kv[1])
    return {"baseline_bytes": baseline, "peak_bytes": peak, "traced_live_at_peak_bytes": sum(groups.values()),
            "events": len(trace), "peak_event": peak_at,
            "by_site": [{"site": s, "bytes": b, "gib": round(b / 2**30, 3)} for s, b in ranked[:top]]}


if __name__ == "__main__":
    print(json.dumps(live_at_peak(sys.argv[1]), indent=1))
