# 2026-12-07 (twenty-seventh session), second call, after part 3 of 2026-12-07e-offload-batch/next.sh measured gpu-accum
# +6.5% at the selector's offload batch. Why: (a) the memory points a default needs (gpu-accum at micro-batch 8,
# with and without checkpointing); (b) goal 3 with gpu-accum: zero3_offload against the Trainer's ZeRO-3 optimizer
# offload at the selector's batch, in one call.
# Predictions: points +2.2 GB over zero3_offload's defaults (llama-1b's 16-bit gradients); goal 3 at the selector's
# batch 1.20-1.26x (1.161x before, times +3-8%).
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs wn4
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
cd .gpu/src
folders llama-1b
offload_batch llama-1b
X=exp.gpu-grads.overlap-comm.gpu-cast.gpu-accum
fits 150 && python3 benchmarks/gpu_memory.py --out $W/memory --budget-s 70 --lanes 2 --capacity-gib 76 \
  --jobs "llama-1b:zero3_offload:liger:noac:8:$X,llama-1b:zero3_offload:liger:ac:8:$X" 2>&1 | q
fits 200 && python3 benchmarks/gpu_peers.py --out $W/peers --offload-steps 4 --offload-warmup 1 --micro-batch-size $MB \
  --grad-accum $GA --pairs "zero3_offload=zero3_offload_liger" --extra "--experiments gpu-grads,overlap-comm,gpu-cast,gpu-accum" \
  --tag gpu-accum 2>&1 | q
echo total $(el)s
