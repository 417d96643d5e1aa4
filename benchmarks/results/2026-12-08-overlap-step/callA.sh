# Written 2026-12-07 (twenty-eighth session), before any run; run as call A on 2026-12-08 (an H100 came). One call, on
# either card, carrying .carry and .gpu (after `bash benchmarks/gpu_pack.sh --src`), timeout 590, LIMIT below it:
#   LIMIT=555 bash benchmarks/results/2026-12-08-overlap-step/callA.sh
# Why: overlap-step (strategies/deepspeed_offload_overlap.py, new, CPU-tested only) runs the CPU sub-groups' clip,
# AdamW and copy on a host thread beside the next forward. Measured here at the selector's offload batch (R = 1),
# alternating default, overlap-step, overlap-step, default, then the Trainer's offload + Liger of the same call.
# Predictions (before the run):
#   H100 (16 x 4): +4-7% tokens/s (up to the first micro-batch's forward, ~0.14 s of ~2.3 s, hidden);
#   H200 (32 x 2): +10-15% (~0.3 s of ~2.2 s);
#   the peak within 0.3 GB of the defaults' (one more fp32 staging chunk can be live beside the forward's first
#   activations); losses equal to the defaults' where the GPU's kernels are deterministic, else within bf16 noise;
#   reads that waited (SHARDLAB_TRACE): more than 0 every step.
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs wo
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
cd .gpu/src
folders llama-1b
offload_batch llama-1b
O="python3 benchmarks/gpu_peers.py --out $W/peers --offload-steps 4 --offload-warmup 1 --micro-batch-size $MB --grad-accum $GA"
for t in default overlap-step overlap-step default; do
  x=""; [ $t = overlap-step ] && x="--experiments gpu-grads,overlap-comm,gpu-cast,overlap-step"
  fits 100 && SHARDLAB_TRACE=$W/trace-$t-$(el).txt $O --pairs "zero3_offload=" --extra "$x" --tag $t 2>&1 | q; done
for f in $W/trace-overlap-step-*.txt; do [ -f $f ] && echo "$f: $(grep -c '^zero3-offload-overlap ' $f) steps queued, waited: $(grep '^zero3-offload-overlap-waited' $f | cut -d' ' -f2 | tr '\n' ' ')"; done
fits 150 && $O --pairs "zero3_offload=zero3_offload_liger" 2>&1 | q  # the Trainer's side of the same call (and ours once more)
echo total $(el)s
