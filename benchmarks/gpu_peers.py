"""shardlab's presets against the Hugging Face Trainer's equivalents, alternating in one call on one GPU.

Each pair is a shardlab preset and the Trainer modes that do the same job (benchmarks/hf_peer.py), e.g.
fsdp against FSDP2 with and without Liger. Within a pair the systems run one after another, and with
--rounds 2 again in the opposite order, so that drift over the call falls on both sides. Both sides do the
same work: the model's shape, seq 2048, the micro-batch, bf16 autocast over fp32 masters, AdamW, clipping at
1.0, no accumulation unless --grad-accum (both sides); each figure is the median optimizer-step time after the warm-up steps, step end to
step end. shardlab runs with its GPU defaults (what `recipe run` resolves; the row keeps that whole config).

Usage (GPU machine, repo root, shardlab importable):
    python3 benchmarks/gpu_peers.py --out OUT --model llama-1b --micro-batch-size 8 \
        --pairs "fsdp=fsdp2_liger,fsdp2;zero3=zero3_liger,zero3;zero3_offload=zero3_offload" [--rounds 2]
Writes OUT/gpu_peers.json (date, device, versions, rows of {shape, micro_batch_size, system, strategy,
tokens_per_s, mfu, peak_memory_bytes, command, ...}; rewritten after every run) and OUT/gpu_peers.md.
With SHARDLAB_AB=LEVER in the environment (the lever among --extra's --experiments) a shardlab row also carries
`lever_ab`: the lever off and on in alternating blocks of the same run (recipes/lever_ab.py); its tokens_per_s then
mixes both sides, and the figure to read is lever_ab's speedup.
"""
from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from benchmarks.gpu_strategies import command_env, run_shardlab, versions  # noqa: E402


def run_peer(out: Path, model: str, mode: str, mb: int, steps: int, warmup: int, ac: bool, port: int,
             grad_accum: int = 1, logging_steps: int = 1, offload_ratio: float = 1.0) -> dict:
    base, liger = mode.removesuffix("_liger"), mode.endswith("_liger")
    result = out / f"hf-{model}-{mode}-mb{mb}-{time.time_ns()}.json"
    args = ["--model", model, "--mode", base, "--micro-batch-size", str(mb), "--steps", str(steps), "--warmup", str(warmup)] \
        + (["--liger"] if liger else []) + (["--activation-checkpointing"] if ac else []) \
        + (["--grad-accum", str(grad_accum)] if grad_accum != 1 else []) \
        + (["--logging-steps", str(logging_steps)] if logging_steps != 1 else []) \
        + (["--offload-ratio", f"{offload_ratio:g}"] if offload_ratio != 1 and base == "zero3_offload" else [])
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "1", "--master_port", str(port),
           str(HERE / "hf_peer.py"), *args, "--out", str(result)]
    t0 = time.perf_counter()
    with open(result.with_suffix(".log"), "w") as log:
        rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT)
    if rc != 0 or not result.exists():
        return {"rc": rc, "error": result.with_suffix(".log").read_text()[-1500:]}
    r = json.loads(result.read_text())
    return {"rc": 0, "tokens_per_s": r["tokens_per_s"], "mfu": r["mfu"], "peak_memory_bytes": r["peak_memory_bytes"],
            "peak_requested_bytes": r.get("peak_requested_bytes"),
            "losses": r["losses"], "median_step_s": r["median_step_s"], "step_s": r["step_s"],
            "wall_s": round(time.perf_counter() - t0, 1), "config": {"trainer_args": r["trainer_args"], "versions": r["versions"]},
            "command": command_env() + "torchrun --nproc_per_node 1 benchmarks/hf_peer.py " + " ".join(args) + " --out FILE.json"}


def parse_pairs(spec: str) -> list[tuple[str, list[str]]]:
    pairs = []
    for item in filter(None, spec.split(";")):
        ours, peers = item.split("=")
        pairs.append((ours.strip(), [p.strip() for p in peers.split(",") if p.strip()]))
    return pairs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default="llama-1b")
    ap.add_argument("--micro-batch-size", type=int, default=8)
    ap.add_argument("--pairs", default="fsdp=fsdp2_liger,fsdp2;zero3=zero3_liger,zero3;zero3_offload=zero3_offload")
    ap.add_argument("--rounds", type=int, default=1, help="2: each pair again in the opposite order")
    ap.add_argument("--steps", type=int, default=20, help="timed steps")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    ap.add_argument("--offload-steps", type=int, default=8, help="timed steps of offload runs (each step is seconds)")
    ap.add_argument("--offload-warmup", type=int, default=2)
    ap.add_argument("--activation-checkpointing", action="store_true", help="on both sides")
    ap.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step, on both sides "
                                                               "(the selector's offload batch: 131,072 tokens a step)")
    ap.add_argument("--extra", default="", help="more flags for shardlab's side (a lever); its tag names it")
    ap.add_argument("--tag", default="default")
    ap.add_argument("--peer-logging-steps", type=int, default=1, help="the Trainer logs (a host sync) every N steps; its "
                                                                      "tag: logN where N is not 1")
    ap.add_argument("--peer-offload-ratio", type=float, default=1.0,
                    help="the Trainer's zero3_offload keeps 1 - R of the optimizer on the GPU (DeepSpeed's offload_optimizer.ratio); "
                         "its tag: ratioR where R is not 1 (shardlab's side: --extra \"--offload-ratio R\")")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    results = out / "gpu_peers.json"
    import torch

    doc = json.loads(results.read_text()) if results.exists() else {
        "date": datetime.date.today().isoformat(), "device": torch.cuda.get_device_name(), "peak_flops": 989e12,
        "versions": versions(), "script": [], "rows": []}
    doc["script"].append("benchmarks/gpu_peers.py " + " ".join(sys.argv[1:]))
    port = 29600

    def record(system: str, strategy: str, tag: str, runs: list[dict]) -> None:
        ok = [r for r in runs if r["rc"] == 0]
        row = {"shape": a.model, "micro_batch_size": a.micro_batch_size, "grad_accum": a.grad_accum,
               "activation_checkpointing": a.activation_checkpointing,
               "system": system, "strategy": strategy, "tag": tag, "runs": runs}
        if ok:
            tps = round(statistics.median(r["tokens_per_s"] for r in ok))
            first = ok[0]
            row.update(tokens_per_s=tps, mfu=first["mfu"] * tps / first["tokens_per_s"], peak_memory_bytes=first["peak_memory_bytes"],
                       peak_requested_bytes=first.get("peak_requested_bytes"), command=first["command"],
                       losses=first["losses"], config=first.get("config"))
            if first.get("lever_ab"):  # SHARDLAB_AB: the lever off and on within the run; its figure is the speedup
                row["lever_ab"] = first["lever_ab"]
        # appended, not in place of an earlier row of the same setting: a repeat in one call is a measurement too
        # (2026-12-06h: the second overlap-comm run of a call replaced its first)
        doc["rows"].append(row)
        results.write_text(json.dumps(doc, indent=1))
        ab = row.get("lever_ab") or {}
        print(json.dumps({k: row.get(k) for k in ("shape", "system", "strategy", "tag", "tokens_per_s", "mfu", "peak_memory_bytes",
                                                        "peak_requested_bytes")}
                         | ({"ab": [ab["lever"], ab["tokens_per_s"], ab["speedup"], ab["speedup_95"]]} if ab else {})
                         | ({"error": runs[-1].get("error", "")[-300:]} if not ok else {})), flush=True)

    extra = a.extra.split()
    if a.activation_checkpointing:
        extra.append("--activation-checkpointing")
    for ours, peers in parse_pairs(a.pairs):
        offload = "offload" in ours
        steps, warmup = (a.offload_steps, a.offload_warmup) if offload else (a.steps, a.warmup)
        # keyed by system too: a Trainer mode may share its preset's name (zero3_offload)
        sides = [("shardlab", ours)] + [("hf-trainer", p) for p in peers]
        runs: dict[tuple, list] = {side: [] for side in sides}
        for r in range(a.rounds):
            for system, name in (sides if r % 2 == 0 else sides[::-1]):
                if system == "shardlab":
                    runs[system, name].append(run_shardlab(out, name, a.micro_batch_size, steps, extra, a.tag, warmup,
                                                           a.grad_accum, a.model))
                else:
                    port += 1
                    runs[system, name].append(run_peer(out, a.model, name, a.micro_batch_size, steps, warmup,
                                                       a.activation_checkpointing, port, a.grad_accum,
                                                       a.peer_logging_steps, a.peer_offload_ratio))
        peer_tag = "+".join(([f"log{a.peer_logging_steps}"] if a.peer_logging_steps != 1 else [])
                            + ([f"ratio{a.peer_offload_ratio:g}"] if a.peer_offload_ratio != 1 else [])) or "default"
        for system, name in sides:
            record(system, name, a.tag if system == "shardlab" else peer_tag, runs[system, name])
    write_table(doc, out / "gpu_peers.md")


def write_table(doc: dict, path: Path) -> None:
    gib = lambda r: f"{r['peak_memory_bytes'] / 2**30:.1f}" if r.get("peak_memory_bytes") else "-"
    lines = [f"date {doc['date']}, device {doc['device']}, versions {doc['versions']}", "",
             "| shape, micro-batch | system | strategy / mode | setting | tokens/s | MFU | peak GiB | shardlab / this |",
             "|---|---|---|---|---|---|---|---|"]
    rows = doc["rows"]
    for r in rows:
        if r["system"] != "shardlab":
            continue
        group = [x for x in rows if (x["shape"], x["micro_batch_size"], x.get("grad_accum", 1), x["activation_checkpointing"])
                 == (r["shape"], r["micro_batch_size"], r.get("grad_accum", 1), r["activation_checkpointing"])]
        peers = [x for x in group if x["system"] == "hf-trainer" and x["strategy"].removesuffix("_liger") == PEER_FAMILY.get(r["strategy"])]
        where = f"{r['shape']}, {r['micro_batch_size']}" + (f" x {r['grad_accum']}" if r.get("grad_accum", 1) != 1 else "") \
            + (", ckpt" if r["activation_checkpointing"] else "")
        for x in [r, *peers]:
            ratio = "" if x is r or not x.get("tokens_per_s") or not r.get("tokens_per_s") else f"{r['tokens_per_s'] / x['tokens_per_s']:.3f}"
            tps = f"{x['tokens_per_s']:,}" if x.get("tokens_per_s") else "failed"
            mfu = f"{x['mfu']:.1%}" if x.get("mfu") else "-"
            lines.append(f"| {where} | {x['system']} | {x['strategy']} | {x['tag']} | {tps} | {mfu} | {gib(x)} | {ratio} |")
    lines += ["", "Commands:"] + [f"- `{x['command']}`" for x in rows if x.get("command")]
    path.write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:-len([x for x in rows if x.get('command')]) - 2]))


# the Trainer modes a shardlab preset is measured against
PEER_FAMILY = {"fsdp": "fsdp2", "zero3": "zero3", "zero3_offload": "zero3_offload", "ddp": "plain", "zero2": "plain"}


if __name__ == "__main__":
    main()
