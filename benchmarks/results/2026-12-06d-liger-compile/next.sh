# Ran on 2026-12-06 (fourteenth session) as part of 2026-12-06e-idle/callO.sh; results in 2026-12-06e-idle.md.
# Written 2026-12-06 (thirteenth session) after calls M and N, for the next session (not run: this session's device time
# was spent): `LIMIT=540 bash benchmarks/results/2026-12-06d-liger-compile/next.sh`, carrying .carry and .gpu (after
# `bash benchmarks/gpu_pack.sh --src`), timeout 580. On an H100 (the selector's offload batch there is micro-batch 16 x
# accumulation 4; on an H200 it is 32 x 2, and the call asks the selector, as call M did).
# Why: goal 3 at the selector's batch. On the H100 (calls M, N) zero3_offload ran 1.03x the Trainer's offload + Liger,
# and 1.28x / 1.40x / 1.42x with --offload-ratio 0.5 / 0.25 / 0.1. Between R = 0.25 and 0.1 it hardly moves (54,678 /
# 55,752 tokens/s), 24% under fsdp (73,057), so the CPU step is no longer what holds it back. zero3_offload runs none of
# zero3's defaults; lean-config alone gave zero3 +12% (2026-12-05, H200). It was never measured under offload.
# In order: the selector's batch; zero3_offload --experiments lean-config at R = 0.25 and 0.1; lean-config at R = 1 and
# the Trainer's offload + Liger again (the peer, in this call); then lean-config's memory points under offload
# (micro-batch 8, checkpointing on and off), which the estimate needs before lean-config can be an offload default.
# Predictions (before the run): lean-config +8-12% at R = 0.25 and 0.1 (1.5-1.6x the Trainer + Liger), +3-6% at R = 1
# (the CPU step dominates there); memory within 0.3 GiB of the estimate (lean-config frees DeepSpeed's contiguous
# gradient buffer, which the offload estimate does not count on the GPU).
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs wo
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
cd .gpu/src
python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-1b', 42))" 2>&1 | tail -1
offload_batch llama-1b
B="python3 benchmarks/gpu_peers.py --out $W/peers --offload-steps 3 --offload-warmup 1 --steps 6 --warmup 2 --micro-batch-size $MB --grad-accum $GA"
L="--experiments lean-config"
fits 70 && $B --pairs "zero3_offload=" --extra "$L --offload-ratio 0.25" --tag lean-config-ratio0.25 2>&1 | q
fits 70 && $B --pairs "zero3_offload=" --extra "$L --offload-ratio 0.1" --tag lean-config-ratio0.1 2>&1 | q
fits 100 && $B --pairs "zero3_offload=zero3_offload_liger" --extra "$L" --tag lean-config 2>&1 | q
fits 110 && python3 benchmarks/gpu_memory.py --out $W/memory --lanes 2 --budget-s 90 --jobs \
  "llama-1b:zero3_offload:liger:ac:8:exp.lean-config,llama-1b:zero3_offload:liger:noac:8:exp.lean-config" 2>&1 | q
echo total $(el)s
