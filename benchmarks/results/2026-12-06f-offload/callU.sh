# Written 2026-12-06 (fifteenth session) after calls S and T, before its run: `LIMIT=300 bash
# benchmarks/results/2026-12-06f-offload/callU.sh`, carrying .carry and .gpu, timeout 330. Any one GPU.
# Why: gpu-grads became zero3_offload's default in this change, so its memory points are measured under it
# (tests/core/test_memory.py test_the_current_gpu_defaults_were_measured): llama-1b micro-batch 8, with and without
# checkpointing, at the default ratio (1).
# Predictions (before the run): the same peaks as DeepSpeed's own path (at R = 1 on a GPU every sub-group steps on the
# CPU and the lever changes nothing): within 50 MB of the stock points (5.93 / 25.19 GB on the H200), within 10% of
# the estimate.
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs wu
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
cd .gpu/src
fits 110 && python3 benchmarks/gpu_memory.py --out $W/memory --lanes 2 --budget-s 100 --jobs \
  "llama-1b:zero3_offload:liger:ac:8:exp.gpu-grads,llama-1b:zero3_offload:liger:noac:8:exp.gpu-grads" 2>&1 | q
echo total $(el)s
