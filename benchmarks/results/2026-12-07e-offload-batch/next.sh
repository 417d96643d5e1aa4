# Written 2026-12-07 (twenty-fifth session) for the next session; not run. Three calls on one warm machine, carrying
# .carry and .gpu (after `bash benchmarks/gpu_pack.sh --src`), timeout 590 each, each right after the one before
# (the twenty-sixth session got no machine: where only one call fits, run PART=3 first, on either card):
#   PART=1 LIMIT=560 bash benchmarks/results/2026-12-07e-offload-batch/next.sh
#   PART=2 LIMIT=560 bash benchmarks/results/2026-12-07e-offload-batch/next.sh
#   PART=3 LIMIT=560 bash benchmarks/results/2026-12-07e-offload-batch/next.sh
# An H200 if one comes (goals 1, 2 and 4 name it; none has been lent since expandable segments became the default),
# else an H100.
# Why:
#   Part 1: goals 1 and 2 with today's defaults, each pair in both orders (--rounds 2).
#   Part 2: goal 4 (the 3B shape, fsdp at the micro-batch `auto` picks); goal 2's 3B zero3 side again.
#   Part 3: gpu-accum (offered 2026-12-07e, never run on a GPU) against zero3_offload's defaults at the selector's
#   offload batch, alternating; R = 1's profile there (10 steps: the window is steps 6..8; 2026-12-07e's 8-step runs
#   never closed it).
# Predictions (before the run), on an H200:
#   goal 1: fsdp 1.09-1.14x FSDP2 + Liger on both shapes, under its peak;
#   goal 2: zero3 0.97-1.00x fsdp;
#   goal 4: 57-60% MFU;
#   gpu-accum: +3-10% tokens/s at R = 1, its peak +2.2 GB (llama-1b's 16-bit gradients), losses within bf16 noise;
#   the profile: the host's AdamW and clip 300-450 ms of the step after backward, device idle through them.
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs wn${PART:-1}
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
cd .gpu/src
folders llama-1b $([ "${PART:-1}" = 3 ] || echo llama-3.2-3b)
if [ "${PART:-1}" = 1 ]; then
  fits 200 && python3 benchmarks/gpu_peers.py --out $W/peers --micro-batch-size 8 --steps 20 --warmup 5 --rounds 2 \
    --pairs "fsdp=fsdp2_liger;zero3=" 2>&1 | q
  fits 250 && python3 benchmarks/gpu_peers.py --out $W/peers --model llama-3.2-3b --micro-batch-size 4 --steps 20 --warmup 6 \
    --rounds 2 --pairs "fsdp=fsdp2_liger" 2>&1 | q
elif [ "${PART:-1}" = 2 ]; then
  MB3=$(python3 -m shardlab.recipes.cli plan --model llama-3.2-3b --strategy fsdp --json | python3 -c "import json,sys; print(json.load(sys.stdin)['micro_batch_size'])")
  echo "goal 4: micro-batch $MB3 at $(el)s"
  G3="python3 benchmarks/gpu_peers.py --out $W/peers --model llama-3.2-3b --steps 20 --warmup 6"
  fits 90 && $G3 --micro-batch-size $MB3 --pairs "fsdp=" 2>&1 | q
  for s in zero3 zero3; do fits 80 && $G3 --micro-batch-size 4 --pairs "$s=" 2>&1 | q; done  # goal 2's 3B zero3 side
else
  offload_batch llama-1b
  O="python3 benchmarks/gpu_peers.py --out $W/peers --offload-steps 4 --offload-warmup 1 --micro-batch-size $MB --grad-accum $GA --pairs zero3_offload="
  for t in default gpu-accum gpu-accum default; do
    x=""; [ $t = gpu-accum ] && x="--experiments gpu-grads,overlap-comm,gpu-cast,gpu-accum"
    fits 90 && $O --extra "$x" --tag $t 2>&1 | q; done
  R="python3 -m shardlab.recipes.cli run --model llama-1b --strategy zero3_offload --precision bf16-mixed --seq-len 2048 --no-export --metrics none --micro-batch-size $MB --grad-accum $GA --max-steps 10"
  fits 110 && { SHARDLAB_PROFILE=$W/profile-r1.txt timeout 110 $R --output $W/rp > $W/rp.log 2>&1; echo "profile rc $? at $(el)s"; sed -n '1,14p;/top 25 host/,+16p;/device idle/,$p' $W/profile-r1.txt | cut -c1-220; }
fi
echo total $(el)s
# 2026-12-07g (twenty-seventh session): part 3 ran on an H100 (results/2026-12-07g-gpu-accum.md): gpu-accum +6.5%,
# kept opt-in; its memory points measured. The next session runs results/2026-12-07g-gpu-accum/next.sh instead.
