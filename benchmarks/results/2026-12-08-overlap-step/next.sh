# Written 2026-12-08 (twenty-eighth session) for the next session; not run. Up to three calls on one warm machine,
# carrying .carry and .gpu (after `bash benchmarks/gpu_pack.sh --src`), timeout 590 each, each sent right after the one
# before, always with LIMIT set below the call's timeout:
#   PART=N LIMIT=555 bash benchmarks/results/2026-12-08-overlap-step/next.sh
# On an H100: part 3 first, then part 4. On an H200: parts 1 and 2 (goals 1, 2 and 4 name the H200), then part 3.
# Device-adaptive first call:
#   if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then P=1; else P=3; fi; PART=$P LIMIT=555 bash ...
# Why:
#   Parts 1 and 2: 2026-12-07e's next.sh, unchanged (goals 1 and 2 in both orders; goal 4 and the 3B zero3 runs).
#   Part 3: copy-stream (built 2026-12-08 after the calls, never run on a GPU) against overlap-step alone, alternating
#   at the selector's offload batch, with the trace of reads that waited; then the Trainer's offload + Liger of the
#   same call beside copy-stream (goal 3).
#   Part 4: overlap-step's memory points (micro-batch 8, with and without checkpointing), which making it a default
#   needs; then R = 1's profile under overlap-step (150 s), to see what is left between backward and the next forward.
# Predictions (before the run):
#   goal 1: fsdp 1.09-1.14x FSDP2 + Liger on both shapes, under its peak; goal 2: zero3 0.97-1.00x fsdp;
#   goal 4: 57-60% MFU;
#   part 3 (H100, 16 x 4): copy-stream +2-5% over overlap-step (about 57.5k -> 59-60k tokens/s); its peak at most
#   0.3 GB over overlap-step's (gpu-cast's staging chunk beside the forward's activations); losses within bf16 noise;
#   part 4: the points within 0.3 GB of the defaults' (25.19 / 5.93 GB on the H100), the estimate's error as before.
[ "${PART:-1}" -ge 3 ] || exec bash benchmarks/results/2026-12-07e-offload-batch/next.sh
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs wq${PART}
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
cd .gpu/src
folders llama-1b
offload_batch llama-1b
O="python3 benchmarks/gpu_peers.py --out $W/peers --offload-steps 4 --offload-warmup 1 --micro-batch-size $MB --grad-accum $GA"
X=gpu-grads,overlap-comm,gpu-cast,overlap-step
if [ "$PART" = 3 ]; then
  for t in overlap-step copy-stream copy-stream overlap-step; do
    x="--experiments $X"; [ $t = copy-stream ] && x="$x,copy-stream"
    fits 75 && SHARDLAB_TRACE=$W/trace-$t-$(el).txt $O --pairs "zero3_offload=" --extra "$x" --tag $t 2>&1 | q; done
  for f in $W/trace-*.txt; do [ -f $f ] && echo "$f: waited $(grep '^zero3-offload-overlap-waited' $f | cut -d' ' -f2 | tr '\n' ' ')"; done
  fits 140 && $O --pairs "zero3_offload=zero3_offload_liger" --extra "--experiments $X,copy-stream" --tag copy-stream 2>&1 | q
else
  E=exp.${X//,/.}
  fits 150 && python3 benchmarks/gpu_memory.py --out $W/memory --budget-s 70 --lanes 2 --capacity-gib 76 \
    --jobs "llama-1b:zero3_offload:liger:noac:8:$E,llama-1b:zero3_offload:liger:ac:8:$E" 2>&1 | q
  R="python3 -m shardlab.recipes.cli run --model llama-1b --strategy zero3_offload --precision bf16-mixed --seq-len 2048 --no-export --metrics none --micro-batch-size $MB --grad-accum $GA --max-steps 10 --experiments $X"
  fits 150 && { SHARDLAB_PROFILE=$W/profile-overlap.txt timeout 150 $R --output $W/rp > $W/rp.log 2>&1; echo "profile rc $? at $(el)s"; sed -n '1,14p;/top 25 host/,+16p;/device idle/,$p' $W/profile-overlap.txt | cut -c1-220; }
fi
echo total $(el)s
