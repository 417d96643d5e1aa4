# Session 2026-12-07e (twenty-fifth), call B, right after call A on the same warm machine:
# `LIMIT=560 bash benchmarks/results/2026-12-07e-offload-batch/callB.sh`, carrying .carry and .gpu, timeout 590.
# Why: goal 2 under expandable segments was one run a shape (2026-12-07c call J: 0.977x / 0.991x); goal 4 not re-measured
# since. zero3 and fsdp in both orders on both shapes (the 3B shape's fsdp rows give goal 4's MFU); then zero3_offload
# and the Trainer's offload + Liger at half the selector's offload batch (32 x 1); a profile of R = 1 at 32 x 2.
# Predictions (before the run): zero3 0.975-1.000x fsdp on both shapes; the 3B shape's fsdp 57-60% MFU; at 32 x 1
# zero3_offload 1.35-1.6x the Trainer's offload + Liger.
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs wp
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
cd .gpu/src
folders llama-1b llama-3.2-3b
G1="python3 benchmarks/gpu_peers.py --out $W/peers --micro-batch-size 8 --steps 20 --warmup 5"
G3="python3 benchmarks/gpu_peers.py --out $W/peers --model llama-3.2-3b --micro-batch-size 4 --steps 20 --warmup 6"
for s in zero3 fsdp fsdp zero3; do fits 80 && $G1 --pairs "$s=" 2>&1 | q; done
for s in fsdp zero3 zero3 fsdp; do fits 90 && $G3 --pairs "$s=" 2>&1 | q; done
offload_batch llama-1b  # then half the selector's offload batch, both sides (goal 3 there)
fits 150 && python3 benchmarks/gpu_peers.py --out $W/peers --offload-steps 4 --offload-warmup 1 --micro-batch-size $MB --grad-accum 1 \
  --pairs "zero3_offload=zero3_offload_liger" 2>&1 | q
R="python3 -m shardlab.recipes.cli run --model llama-1b --strategy zero3_offload --precision bf16-mixed --seq-len 2048 --no-export --metrics none --micro-batch-size $MB --grad-accum 2 --max-steps 8"
fits 100 && { SHARDLAB_PROFILE=$W/profile-r1.txt timeout 100 $R --output $W/rp > $W/rp.log 2>&1; echo "profile rc $? at $(el)s"; sed -n '1,12p;/top 25 host/,+14p;/device idle/,$p' $W/profile-r1.txt; }
echo total $(el)s
