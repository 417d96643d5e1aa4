# Written 2026-12-07 (twenty-seventh session) for the next session; not run. Up to three calls on one warm machine,
# carrying .carry and .gpu (after `bash benchmarks/gpu_pack.sh --src`), timeout 590 each, each right after the one
# before, always with LIMIT set below the call's timeout (without it the outputs are tarred at 540 s):
#   PART=N LIMIT=555 bash benchmarks/results/2026-12-07g-gpu-accum/next.sh
# An H200 if one comes (goals 1, 2 and 4 name it): part 1 first there. On an H100, part 3 first.
# Why:
#   Part 1: goals 1 and 2 with today's defaults, each pair in both orders (--rounds 2).
#   Part 2: goal 4 (the 3B shape, fsdp at the micro-batch `auto` picks); goal 2's 3B zero3 side again.
#   Part 3: goal 3 at the selector's offload batch, the Trainer's offload + Liger in both orders beside the defaults
#   (2026-12-07g's one pair, 1.808x, came on a host where the Trainer ran 1.58x slower than on 2026-12-07e's), then R = 1's
#   profile over 10 steps (150 s, time to finish) if the call has that left.
# Predictions (before the run), on an H200:
#   goal 1: fsdp 1.09-1.14x FSDP2 + Liger on both shapes, under its peak;
#   goal 2: zero3 0.97-1.00x fsdp;
#   goal 4: 57-60% MFU;
#   part 3 (either card): the defaults 1.13-1.30x the Trainer's offload at R = 1;
#   the profile: the host's AdamW and clip 300-450 ms of the step after backward, device idle through them.
# Parts 1 and 2 are those of 2026-12-07e's next.sh, unchanged.
[ "${PART:-1}" = 3 ] || exec bash benchmarks/results/2026-12-07e-offload-batch/next.sh
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs wp3
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
cd .gpu/src
folders llama-1b
offload_batch llama-1b
# goal 3 at the selector's batch: the Trainer's offload + Liger beside the defaults, in both orders
O="python3 benchmarks/gpu_peers.py --out $W/peers --offload-steps 4 --offload-warmup 1 --micro-batch-size $MB --grad-accum $GA"
fits 400 && $O --pairs "zero3_offload=zero3_offload_liger" --rounds 2 2>&1 | q  # about 190 s a round (2026-12-07g)
R="python3 -m shardlab.recipes.cli run --model llama-1b --strategy zero3_offload --precision bf16-mixed --seq-len 2048 --no-export --metrics none --micro-batch-size $MB --grad-accum $GA --max-steps 10"
fits 150 && { SHARDLAB_PROFILE=$W/profile-r1.txt timeout 150 $R --output $W/rp > $W/rp.log 2>&1; echo "profile rc $? at $(el)s"; sed -n '1,14p;/top 25 host/,+16p;/device idle/,$p' $W/profile-r1.txt | cut -c1-220; }
echo total $(el)s
