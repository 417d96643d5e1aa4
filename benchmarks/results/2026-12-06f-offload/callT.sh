# Written 2026-12-06 (fifteenth session) right after call S, on its machine while warm: `LIMIT=560 bash
# benchmarks/results/2026-12-06f-offload/callT.sh`, carrying .carry and .gpu, timeout 590.
# Why: call S gave gpu-grads + lean-config at R = 0.1 1.510x the Trainer's offload + Liger, at the edge of goal 3's
# 1.5x. This repeats the Trainer beside it, adds lean-config alone at R = 0.1 (to split the two levers) and both at
# R = 0.25, then profiles both at R = 0.1.
# Predictions (before the run): the Trainer within 3% of call S's 43,935; gpu-grads + lean-config at R = 0.1 within 2%
# of 66,344; lean-config alone at R = 0.1 57,000-60,000; both at R = 0.25 61,000-64,000.
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs wt
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
cd .gpu/src
offload_batch llama-1b
B="python3 benchmarks/gpu_peers.py --out $W/peers --offload-steps 3 --offload-warmup 1 --steps 6 --warmup 2 --micro-batch-size $MB --grad-accum $GA"
G="--experiments gpu-grads,lean-config"
fits 50 && $B --pairs "zero3_offload=" --extra "$G --offload-ratio 0.1" --tag gpu-grads-lean-ratio0.1 2>&1 | q
fits 110 && $B --pairs "zero3_offload=zero3_offload_liger" --extra "$G --offload-ratio 0.1" --tag gpu-grads-lean-ratio0.1 2>&1 | q
fits 50 && $B --pairs "zero3_offload=" --extra "--experiments lean-config --offload-ratio 0.1" --tag lean-ratio0.1 2>&1 | q
fits 50 && $B --pairs "zero3_offload=" --extra "$G --offload-ratio 0.25" --tag gpu-grads-lean-ratio0.25 2>&1 | q
R="python3 -m shardlab.recipes.cli run --model llama-1b --strategy zero3_offload --precision bf16-mixed --seq-len 2048 --no-export --metrics none --micro-batch-size $MB --grad-accum $GA --max-steps 10"
fits 100 && { SHARDLAB_PROFILE=$W/profile-gpu-grads-lean-r0.1.txt timeout 100 $R $G --offload-ratio 0.1 --output $W/rp > $W/rp.log 2>&1; echo "profile rc $? at $(el)s"; sed -n '1,12p;/device idle/,$p' $W/profile-gpu-grads-lean-r0.1.txt; }
echo total $(el)s
