# Written 2026-12-06 (sixteenth session), with next.sh (read its header), for the next session: `LIMIT=540 bash
# benchmarks/results/2026-12-06g-cast/next2.sh`, carrying .carry and .gpu, timeout 580. Any one GPU.
# Why: the 3B shape (tied embeddings, 128k vocabulary) at the selector's offload batch (8 x 8 on an H100): call W ran
# zero3_offload's default at 0.850x the Trainer's offload + Liger; call X ran overlap-comm's config first and the default
# second (+24%). Here the Trainer beside overlap-comm, then the default and overlap-comm again: both orders.
# Predictions (before the run): overlap-comm 0.95-1.05x the Trainer; +15-25% over the default in either order.
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs wz
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
cd .gpu/src
python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-3.2-3b', 42))" 2>&1 | tail -1
echo "init at $(el)s"
offload_batch llama-3.2-3b
B="python3 benchmarks/gpu_peers.py --out $W/peers --model llama-3.2-3b --offload-steps 3 --offload-warmup 1 --micro-batch-size $MB --grad-accum $GA"
O="--experiments gpu-grads,overlap-comm"
fits 240 && $B --pairs "zero3_offload=zero3_offload_liger" --extra "$O" --tag overlap-comm 2>&1 | q
fits 120 && $B --pairs "zero3_offload=" 2>&1 | q
fits 110 && $B --pairs "zero3_offload=" --extra "$O" --tag overlap-comm 2>&1 | q
echo total $(el)s
