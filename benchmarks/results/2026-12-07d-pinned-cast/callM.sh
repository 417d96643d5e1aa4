# Written 2026-12-07 (twenty-fourth session) before its run: `LIMIT=560 bash benchmarks/results/2026-12-07d-pinned-cast/callM.sh`,
# carrying .carry and .gpu (after `bash benchmarks/gpu_pack.sh --src`), timeout 590. Any one GPU.
# Why: goal 3. gpu-cast measured slower twice (2026-12-05d H200 at R = 1; 2026-12-06g H100 at R = 0.1) because its
# source was never pinned: DeepSpeed 0.19.8 makes the CPU-stepped fp32 weights with .to("cpu", float32).clone(), so each
# "non-blocking" chunk waited for the host and carried fp32 (twice DeepSpeed's 16-bit bytes). gpu-cast now page-locks
# those buffers in place (cudaHostRegister). The profile of 2026-12-05b put 305 ms of a 1,403 ms step (R = 1, mb 8) in
# DeepSpeed's pageable copy.
# Predictions (before the run): page_lock works (is_pinned True, the copy equal); gpu-cast at R = 1 +15-25% at micro-batch
# 8 (1.15-1.3x the Trainer's offload + Liger), +6-12% at the selector's batch (16 x 4: 1.05-1.15x the Trainer); at
# R = 0.1 with lean-config +1-4%; every peak within 300 MB of the run without (a 256 MiB fp32 staging chunk in the step).
# The carried tree makes gpu-cast a zero3_offload default, so its two memory points are measured here; the runs tagged
# nocast name zero3_offload's earlier defaults.
# The profile (mb 8, R = 1, gpu-cast): no "Memcpy HtoD (Pageable -> Device)" left; the host's CPU Adam ~270 ms a step.
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs wm
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
cd .gpu/src
python3 - <<'P' 2>&1 | tail -2
import torch
from shardlab.strategies.deepspeed_offload_cast import page_lock
t = torch.randn(1 << 24)
n = page_lock([t]); d = torch.empty(1 << 24, device="cuda", dtype=torch.bfloat16); d.copy_(t, non_blocking=True)
torch.cuda.synchronize(); print("page_lock", n, t.is_pinned(), torch.equal(d.cpu(), t.to(torch.bfloat16)))
P
folders llama-1b
offload_batch llama-1b
D="--experiments gpu-grads,overlap-comm"  # zero3_offload's defaults before this change: without gpu-cast
B="python3 benchmarks/gpu_peers.py --out $W/peers --offload-steps 3 --offload-warmup 1 --steps 6 --warmup 2 --micro-batch-size $MB --grad-accum $GA"
B8="python3 benchmarks/gpu_peers.py --out $W/peers --offload-steps 6 --offload-warmup 2 --steps 6 --warmup 2 --micro-batch-size 8 --grad-accum 1"
fits 120 && $B --pairs "zero3_offload=zero3_offload_liger" 2>&1 | q
fits 60 && $B --pairs "zero3_offload=" --extra "$D" --tag nocast 2>&1 | q
fits 130 && python3 benchmarks/gpu_memory.py --out $W/memory --budget-s 60 --lanes 2 --jobs "llama-1b:zero3_offload:liger:noac:8,llama-1b:zero3_offload:liger:ac:8" 2>&1 | q
fits 100 && $B8 --pairs "zero3_offload=zero3_offload_liger" 2>&1 | q
fits 50 && $B8 --pairs "zero3_offload=" --extra "$D" --tag nocast 2>&1 | q
fits 60 && $B --pairs "zero3_offload=" --extra "$D,gpu-cast,lean-config --offload-ratio 0.1" --tag cast-lean-ratio0.1 2>&1 | q
fits 60 && $B --pairs "zero3_offload=" --extra "$D,lean-config --offload-ratio 0.1" --tag lean-ratio0.1 2>&1 | q
R="python3 -m shardlab.recipes.cli run --model llama-1b --strategy zero3_offload --precision bf16-mixed --seq-len 2048 --no-export --metrics none --micro-batch-size 8 --max-steps 10"
fits 70 && { SHARDLAB_PROFILE=$W/profile-cast-mb8.txt timeout 70 $R --output $W/rp > $W/rp.log 2>&1; echo "profile rc $? at $(el)s"; sed -n '1,12p;/top 25 host/,+14p;/device idle/,$p' $W/profile-cast-mb8.txt; }
python3 - $W <<'P'
import json, sys, os
w = sys.argv[1]
if os.path.exists(f"{w}/memory/memory.json"):
    d = json.load(open(f"{w}/memory/memory.json")); rows = d["rows"] if isinstance(d, dict) else d
    for r in rows:
        print(r["preset"], "ac" if r["activation_checkpointing"] else "noac", r["rc"], r.get("measured_bytes"),
              r.get("requested_bytes"), (r.get("config") or {}).get("experiments"), r.get("error"), r.get("wall_s"))
if os.path.exists(f"{w}/peers/gpu_peers.json"):
    for r in json.load(open(f"{w}/peers/gpu_peers.json"))["rows"]:
        for x in r["runs"]:
            c = x.get("config") or {}
            print(r["micro_batch_size"], r.get("grad_accum"), r["system"], r.get("tag"), x.get("tokens_per_s"), x.get("peak_memory_bytes"),
                  x.get("median_step_s"), (x.get("losses") or [None])[-1], c.get("experiments"), c.get("offload_ratio"))
P
echo total $(el)s
