# Written 2026-12-06 (fourteenth session) before its run: `LIMIT=545 bash benchmarks/results/2026-12-06e-idle/callO.sh`,
# carrying .carry and .gpu (after `bash benchmarks/gpu_pack.sh --src`), timeout 590. Any one GPU.
# Why: goal 1 lacks ~2% (llama-1b) and ~4.5% (the 3B shape); the largest pool left in fsdp's step is 13-15 ms a step of
# device idle in ~1,800 gaps (2026-12-06d call L). The profile now sums the idle by the host op running as each gap
# began: under cudaStreamSynchronize the host was ahead (the gaps are the device's own launch gaps), under a Python
# region (Optimizer.step, FSDP's hooks) the host was behind. Then goal 3 at the selector's batch: the runs of
# 2026-12-06d/next.sh (lean-config under offload, its memory points), predictions there.
# Predictions (before the run): llama-1b fsdp defaults, idle 13-16 ms a step; more than half of it while the host runs
# Python (Optimizer.step#AdamW.step, whose self time holds Lightning's closure, or FSDP's hooks), under 5 ms under
# cudaStreamSynchronize. The 3B shape (if time is left): idle 10-15 ms of a ~375 ms step.
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs wo
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
cd .gpu/src
python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-1b', 42))" 2>&1 | tail -1
R="python3 -m shardlab.recipes.cli run --strategy fsdp --precision bf16-mixed --seq-len 2048 --no-export --metrics none --max-steps 10"
fits 80 && { SHARDLAB_PROFILE=$W/profile-fsdp-1b.txt timeout 80 $R --model llama-1b --micro-batch-size 8 --output $W/rp > $W/rp.log 2>&1; echo "profile rc $? at $(el)s"; sed -n '/device idle/,$p' $W/profile-fsdp-1b.txt; }
offload_batch llama-1b
B="python3 benchmarks/gpu_peers.py --out $W/peers --offload-steps 3 --offload-warmup 1 --steps 6 --warmup 2 --micro-batch-size $MB --grad-accum $GA"
L="--experiments lean-config"
fits 70 && $B --pairs "zero3_offload=" --extra "$L --offload-ratio 0.25" --tag lean-config-ratio0.25 2>&1 | q
fits 70 && $B --pairs "zero3_offload=" --extra "$L --offload-ratio 0.1" --tag lean-config-ratio0.1 2>&1 | q
fits 100 && $B --pairs "zero3_offload=zero3_offload_liger" --extra "$L" --tag lean-config 2>&1 | q
fits 110 && python3 benchmarks/gpu_memory.py --out $W/memory --lanes 2 --budget-s 90 --jobs \
  "llama-1b:zero3_offload:liger:ac:8:exp.lean-config,llama-1b:zero3_offload:liger:noac:8:exp.lean-config" 2>&1 | q
fits 100 && { python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-3.2-3b', 42))" 2>&1 | tail -1
  SHARDLAB_PROFILE=$W/profile-fsdp-3b.txt timeout 90 $R --model llama-3.2-3b --micro-batch-size 4 --output $W/rp3 > $W/rp3.log 2>&1; echo "profile 3b rc $? at $(el)s"; sed -n '/device idle/,$p' $W/profile-fsdp-3b.txt; }
echo total $(el)s
