# Written 2026-12-06 (fifteenth session) before its run, in place of callR.sh (which got no machine): `LIMIT=540 bash
# benchmarks/results/2026-12-06f-offload/callS.sh`, carrying .carry and .gpu (after `bash benchmarks/gpu_pack.sh
# --src`), timeout 580. Any one GPU.
# Why: goal 3 at the selector's offload batch (16 x 4 on an H100). zero3_offload at --offload-ratio 0.25 and 0.1 ran
# level (54,678 / 55,752) and 24% under fsdp: under offload DeepSpeed 0.19.8 accumulates every sub-group's gradients in
# a pinned CPU buffer, across PCIe and back at each micro-batch, whatever the ratio. The new lever gpu-grads
# (strategies/deepspeed_offload_grads.py) accumulates the GPU-stepped sub-groups' in their fp32 gradient on the GPU.
# This call runs, at the selector's batch: the Trainer's offload + Liger with zero3_offload's defaults, R = 0.1 stock,
# R = 0.1 and 0.25 with gpu-grads, R = 0.1 with gpu-grads and lean-config, fsdp (nothing offloaded: the bound), then a
# profile of R = 0.1 with gpu-grads.
# Predictions (before the run): the Trainer's offload + Liger 44,000-48,000 tokens/s and zero3_offload's defaults
# 0.95-1.05x it; R = 0.1 stock 55,000-58,000; gpu-grads at R = 0.1 1.12-1.22x R = 0.1 stock (64,000-70,000, 1.35-1.5x
# the Trainer), at R = 0.25 60,000-66,000; lean-config on top +0-3%; fsdp 70,000-74,000; the peak with gpu-grads at
# most the stock R = 0.1's (57.86 GiB at call N); losses at step 4 within 1e-3 of stock (fp32 accumulation on the GPU
# share). The profile: the GPU idle under 10% of the step, no HtoD/DtoH copies per micro-batch beyond the CPU share's.
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs ws
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
cd .gpu/src
python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-1b', 42))" 2>&1 | tail -1
offload_batch llama-1b
B="python3 benchmarks/gpu_peers.py --out $W/peers --offload-steps 3 --offload-warmup 1 --steps 6 --warmup 2 --micro-batch-size $MB --grad-accum $GA"
G="--experiments gpu-grads"
fits 110 && $B --pairs "zero3_offload=zero3_offload_liger" 2>&1 | q
fits 50 && $B --pairs "zero3_offload=" --extra "--offload-ratio 0.1" --tag ratio0.1 2>&1 | q
fits 50 && $B --pairs "zero3_offload=" --extra "$G --offload-ratio 0.1" --tag gpu-grads-ratio0.1 2>&1 | q
fits 50 && $B --pairs "zero3_offload=" --extra "$G --offload-ratio 0.25" --tag gpu-grads-ratio0.25 2>&1 | q
fits 70 && $B --pairs "fsdp=" 2>&1 | q
fits 50 && $B --pairs "zero3_offload=" --extra "$G,lean-config --offload-ratio 0.1" --tag gpu-grads-lean-ratio0.1 2>&1 | q
R="python3 -m shardlab.recipes.cli run --model llama-1b --strategy zero3_offload --precision bf16-mixed --seq-len 2048 --no-export --metrics none --micro-batch-size $MB --grad-accum $GA --max-steps 10"
fits 100 && { SHARDLAB_PROFILE=$W/profile-gpu-grads-r0.1.txt timeout 100 $R $G --offload-ratio 0.1 --output $W/rp > $W/rp.log 2>&1; echo "profile rc $? at $(el)s"; sed -n '1,12p;/device idle/,$p' $W/profile-gpu-grads-r0.1.txt; }
echo total $(el)s
