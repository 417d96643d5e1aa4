# Written 2026-12-07 (twenty-third session) for the next session; not run (this session's device time was spent):
# `LIMIT=560 bash benchmarks/results/2026-12-07c-peak-sites/next.sh`, carrying .carry and .gpu (after
# `bash benchmarks/gpu_pack.sh --src`), timeout 590. An H200 if one comes (the goals name it), else an H100.
# Why: (1) goal 2 under expandable segments was one run a shape (call J: 0.977x / 0.991x); here zero3 and fsdp in both
# orders on both shapes. (2) Goal 3 at the selector's offload batch: where does zero3_offload's step go at R = 0.1 since
# overlap-comm became a default? The last profile (2026-12-06f, call T) predates it: 310 ms of device idle a step,
# the longest gaps after the CPU share's pageable copy back.
# Predictions (before the run): zero3 0.985-1.000x fsdp on both shapes; the profile's device idle under 200 ms a step,
# its longest gaps still after "Memcpy HtoD (Pageable -> Device)"; the Trainer's offload idle over 500 ms a step.
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs wn
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
cd .gpu/src
folders llama-1b llama-3.2-3b
G1="python3 benchmarks/gpu_peers.py --out $W/peers --micro-batch-size 8 --steps 20 --warmup 5"
G3="python3 benchmarks/gpu_peers.py --out $W/peers --model llama-3.2-3b --micro-batch-size 4 --steps 20 --warmup 6"
for s in zero3 fsdp fsdp zero3; do fits 100 && $G1 --pairs "$s=" 2>&1 | q; done  # each in both orders
offload_batch llama-1b
R="python3 -m shardlab.recipes.cli run --model llama-1b --strategy zero3_offload --precision bf16-mixed --seq-len 2048 --no-export --metrics none --micro-batch-size $MB --grad-accum $GA --max-steps 10"
fits 100 && { SHARDLAB_PROFILE=$W/profile-r0.1-lean.txt timeout 100 $R --experiments gpu-grads,overlap-comm,lean-config \
  --offload-ratio 0.1 --output $W/rp > $W/rp.log 2>&1; echo "profile rc $? at $(el)s"; sed -n '1,12p;/device idle/,$p' $W/profile-r0.1-lean.txt; }
fits 150 && { timeout 150 torchrun --nproc_per_node 1 benchmarks/hf_peer.py --model llama-1b --mode zero3_offload --liger \
  --micro-batch-size $MB --grad-accum $GA --steps 4 --warmup 6 --profile $W/profile-hf-offload.txt --out $W/hf-offload.json \
  > $W/hf-offload.log 2>&1; echo "trainer profile rc $? at $(el)s"; sed -n '1,12p;/device idle/,$p' $W/profile-hf-offload.txt; }
for s in zero3 fsdp fsdp zero3; do fits 80 && $G3 --pairs "$s=" 2>&1 | q; done
echo total $(el)s
