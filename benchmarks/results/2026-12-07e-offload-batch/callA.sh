# Session 2026-12-07e (twenty-fifth), call A: `LIMIT=560 bash benchmarks/results/2026-12-07e-offload-batch/callA.sh`,
# carrying .carry and .gpu (after `bash benchmarks/gpu_pack.sh --src`), timeout 590.
# Why: goal 3 at the selector's offload batch was 1.29x at R = 1 (2026-12-07d call M) and 1.54x at --offload-ratio 0.1
# against the Trainer's R = 1 of another call. Here, in one call: both sides at R = 1 again, and both sides at R = 0.1
# (the Trainer's DeepSpeed with offload_optimizer.ratio 0.1, hf_peer.py --offload-ratio), so that the partial offload is
# compared with the peer's own; then zero3 at the same batch (does the selector's offload batch still need 131,072
# tokens a step now that gpu-cast made the step cheaper?), and zero3_offload at 32 x 1 (half the selector's batch).
# Predictions (before the run): R = 1: ours 58-61k, the Trainer 45-47k (1.27-1.32x); R = 0.1: ours 69-72k, the Trainer's
# 52-62k (1.15-1.35x); zero3 at the same batch 72-78k (zero3_offload's time per token 1.2-1.3x zero3's at R = 1);
# zero3_offload at 32 x 1 50-56k (the CPU step over half the tokens).
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs wq
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
cd .gpu/src
folders llama-1b
offload_batch llama-1b
B="python3 benchmarks/gpu_peers.py --out $W/peers --offload-steps 3 --offload-warmup 1 --steps 6 --warmup 2 --micro-batch-size $MB --grad-accum $GA"
fits 150 && $B --pairs "zero3_offload=zero3_offload_liger" --extra "--offload-ratio 0.1" --tag ratio0.1 --peer-offload-ratio 0.1 2>&1 | q
fits 150 && $B --pairs "zero3_offload=zero3_offload_liger" 2>&1 | q
fits 60 && $B --pairs "zero3=" 2>&1 | q
fits 55 && python3 benchmarks/gpu_peers.py --out $W/peers --offload-steps 4 --offload-warmup 1 --micro-batch-size $MB --grad-accum 1 \
  --pairs "zero3_offload=" 2>&1 | q
python3 - $W <<'P'
import json, sys, os
w = sys.argv[1]
if os.path.exists(f"{w}/peers/gpu_peers.json"):
    for r in json.load(open(f"{w}/peers/gpu_peers.json"))["rows"]:
        for x in r["runs"]:
            c = x.get("config") or {}
            print(r["micro_batch_size"], r.get("grad_accum"), r["system"], r["strategy"], r.get("tag"), x.get("tokens_per_s"),
                  x.get("peak_memory_bytes"), x.get("median_step_s"), (x.get("losses") or [None])[-1], c.get("experiments"),
                  c.get("offload_ratio"), x.get("wall_s"), (x.get("error") or "")[-400:])
P
echo total $(el)s
