# Written 2026-12-07 (twenty-third session) before its run: `LIMIT=340 bash benchmarks/results/2026-12-07c-peak-sites/callL.sh`,
# carrying .carry and .gpu (after `bash benchmarks/gpu_pack.sh --src`), timeout 360. Any one GPU.
# Why: call K ran out of time before the 3B shape's pair; call J had it with expandable segments from the environment.
# Here: the CUDA tests of recipes/metrics.py, fsdp and the Trainer's FSDP2 + Liger on the 3B shape through the new
# default's code path, and the one memory point call K did not start (fsdp_offload with checkpointing).
# Predictions (before the run): the tests pass; fsdp 1.10-1.14x the Trainer at 61,326,890,496 bytes (call J), 4.4 MB
# under its peak; the fsdp_offload point within 0.1 MB of its requested peak.
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs wl
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
PYTHONPATH=$PYTHONPATH:$PWD timeout 60 python3 -m pytest -q -p no:cacheprovider --noconftest tests/recipes/test_metrics.py 2>&1 | tail -2
echo "tests at $(el)s"
cd .gpu/src
python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-3.2-3b', 42))" 2>&1 | tail -1
echo "folder at $(el)s"
fits 170 && python3 benchmarks/gpu_peers.py --out $W/peers --model llama-3.2-3b --micro-batch-size 4 --steps 20 --warmup 6 \
  --pairs "fsdp=fsdp2_liger" 2>&1 | q
fits 60 && python3 benchmarks/gpu_memory.py --out $W/memory --budget-s 30 --lanes 1 --jobs "llama-1b:fsdp_offload:liger:ac:8" 2>&1 | q
echo total $(el)s
