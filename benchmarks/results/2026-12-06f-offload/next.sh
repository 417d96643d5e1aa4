# Written 2026-12-06 (fifteenth session) after call U, for the next session (not run: this session's device time was
# spent): `LIMIT=540 bash benchmarks/results/2026-12-06f-offload/next.sh`, carrying .carry and .gpu (after
# `bash benchmarks/gpu_pack.sh --src`), timeout 580. On an H200 it runs 2026-12-06b-h100/callE.sh's H200 branch
# instead (goals 1 and 2 on the goals' device; none has come since 2026-12-05).
# Why (an H100): goal 3 at the selector's offload batch (16 x 4). gpu-grads (now the default) with lean-config at
# R = 0.1 ran 1.445x / 1.510x the Trainer's offload + Liger in two calls; call T's profile puts the longest gaps after
# the CPU share's weights are copied back pageably and cast on the CPU, which gpu-cast replaces (slower on the H200 at
# R = 1, never run at a small ratio). This call puts gpu-cast on top at R = 0.1 beside the Trainer, in both orders.
# Predictions (before the run): gpu-cast on top of gpu-grads + lean-config at R = 0.1 +2-5%; the Trainer within 5% of
# 43,935-45,294.
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs wv
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
case "$DEV" in *H200*) exec env LIMIT=$LIMIT bash benchmarks/results/2026-12-06b-h100/callE.sh ;; esac
cd .gpu/src
python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-1b', 42))" 2>&1 | tail -1
offload_batch llama-1b
B="python3 benchmarks/gpu_peers.py --out $W/peers --offload-steps 3 --offload-warmup 1 --steps 6 --warmup 2 --micro-batch-size $MB --grad-accum $GA"
L="--experiments gpu-grads,lean-config --offload-ratio 0.1"
C="--experiments gpu-grads,lean-config,gpu-cast --offload-ratio 0.1"
fits 110 && $B --pairs "zero3_offload=zero3_offload_liger" --extra "$L" --tag lean-ratio0.1 2>&1 | q
fits 50 && $B --pairs "zero3_offload=" --extra "$C" --tag cast-lean-ratio0.1 2>&1 | q
fits 50 && $B --pairs "zero3_offload=" --extra "$L" --tag lean-ratio0.1 2>&1 | q
fits 50 && $B --pairs "zero3_offload=" --extra "$C" --tag cast-lean-ratio0.1 2>&1 | q
echo total $(el)s
