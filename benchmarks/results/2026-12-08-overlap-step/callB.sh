# Session 2026-12-07/08 (twenty-eighth), call B, on the machine call A left warm, timeout 570, carrying .carry and .gpu.
# Run inline as one line; here one command a line, the same commands. Why: overlap-step with gpu-accum (both opt-in)
# against gpu-accum alone, alternating, then the Trainer's offload + Liger of the same call. No prediction was written
# down before it: it was sent within the 30 s the warm machine waits.
set -u; T0=$(date +%s); LIMIT=530; source .gpu/setup.sh; outputs wo2; nvidia-smi --query-gpu=name --format=csv,noheader
cd .gpu/src; folders llama-1b; offload_batch llama-1b
O="python3 benchmarks/gpu_peers.py --out $W/peers --offload-steps 4 --offload-warmup 1 --micro-batch-size $MB --grad-accum $GA"
for t in gpu-accum both both gpu-accum; do
  x="--experiments gpu-grads,overlap-comm,gpu-cast,gpu-accum"; [ $t = both ] && x="$x,overlap-step"
  fits 75 && SHARDLAB_TRACE=$W/trace-$t-$(el).txt $O --pairs "zero3_offload=" --extra "$x" --tag $t 2>&1 | q; done
fits 140 && $O --pairs "zero3_offload=zero3_offload_liger" --extra "--experiments gpu-grads,overlap-comm,gpu-cast,gpu-accum,overlap-step" --tag both 2>&1 | q
echo total $(el)s
