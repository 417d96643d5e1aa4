# Written 2026-12-06 (thirteenth session) after call K, before its run: `LIMIT=500 bash
# benchmarks/results/2026-12-06d-liger-compile/callL.sh`, carrying .carry and .gpu, timeout 560. Any one GPU.
# Why: --compile --kernels liger is new and selectable; the estimate counts it as compiled layers (14h + 6i + 4kv a
# token) plus Liger's loss. Calls J and K measured it without checkpointing inside timed runs (llama-1b micro-batch 8:
# 33.46 GiB, estimate 34.28; the 3B shape micro-batch 4: 57.28 GiB, estimate 58.82). This call measures its memory
# points with benchmarks/gpu_memory.py, checkpointing on and off, and profiles llama-1b's step under it for goal 1.
# Predictions (before the run): without checkpointing the peaks of calls J and K to 0.1%; with checkpointing within
# 5% of the estimate (llama-1b 17.5-18.5 GiB, as Liger's own point, 17.50, plus the recomputed layer's 0.1 GiB more);
# the profile: matmul and attention as under Liger's kernels (135 / 32 ms a step on an H100), the Triton share and
# elementwise adds together 3-6 ms less, device idle 5-15 ms a step.
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs wl
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
cd .gpu/src
python3 -c "from shardlab.recipes.model import initial_folder as f; [print(f(m, 42)) for m in ('llama-3.2-3b', 'llama-1b')]" 2>&1 | tail -2
echo "folders at $(el)s"
fits 150 && python3 benchmarks/gpu_memory.py --out $W/memory --lanes 2 --budget-s 120 --jobs \
  "llama-1b:fsdp:liger:ac:8:compile,llama-1b:fsdp:liger:noac:8:compile" 2>&1 | q
fits 170 && python3 benchmarks/gpu_memory.py --out $W/memory3 --lanes 2 --budget-s 130 --jobs \
  "llama-3.2-3b:fsdp:liger:ac:4:compile,llama-3.2-3b:fsdp:liger:noac:4:compile" 2>&1 | q
R="python3 -m shardlab.recipes.cli run --model llama-1b --strategy fsdp --precision bf16-mixed --seq-len 2048 --no-export --metrics none --micro-batch-size 8 --max-steps 10"
fits 80 && { SHARDLAB_PROFILE=$W/profile-fsdp-1b-compile-liger.txt timeout 80 $R --compile --kernels liger --output $W/rp > $W/rp.log 2>&1; echo "profile rc $? at $(el)s"; head -40 $W/profile-fsdp-1b-compile-liger.txt; }
echo total $(el)s
