# Written 2026-12-06 (fourteenth session) after call P, before its run: `LIMIT=395 bash
# benchmarks/results/2026-12-06e-idle/callQ.sh`, carrying .carry and .gpu (.gpu/old from 157bec5), timeout 420.
# Why: call P found no gain from the recorder's events alone (llama-1b 67,899 / 68,048 against 68,183 / 67,696; the
# 3B shape 22,101 against 22,094): Lightning copies each batch from pageable memory, and such a copy waits for the GPU
# to finish all the work before it, so the wait moved from the recorder to the batch copy. The DataLoader now pins its
# batches on a GPU (Lightning copies them non_blocking). This call runs the CUDA-only tests (no sync at a step's end;
# pinned batches), then fsdp before (157bec5) and after, and the Trainer's FSDP2 + Liger on llama-1b.
# Predictions (before the run): after / before +0.8-1.5% on llama-1b and +0.5-1.0% on the 3B shape, the same peak.
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs wq
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
PYTHONPATH=$PYTHONPATH:$PWD timeout 120 python3 -m pytest -q -p no:cacheprovider --noconftest tests/recipes/test_metrics.py \
  2>&1 | tail -3; echo "test at $(el)s"
mkdir -p /tmp/slold && ln -sfn $PWD/.gpu/old /tmp/slold/shardlab
OLD="env PYTHONPATH=/tmp/site:/tmp/slold:$PWD/.gpu/old"
cd .gpu/src
python3 -c "from shardlab.recipes.model import initial_folder as f; [print(f(m, 42)) for m in ('llama-1b', 'llama-3.2-3b')]" 2>&1 | tail -2
echo "folders at $(el)s"
G="benchmarks/gpu_peers.py --out $W/peers --micro-batch-size 8 --steps 20 --warmup 5"
G3="benchmarks/gpu_peers.py --out $W/peers --model llama-3.2-3b --micro-batch-size 4 --steps 20 --warmup 6"
fits 45 && (cd ../old && $OLD python3 $G --pairs "fsdp=" --tag step-sync 2>&1) | q
fits 90 && python3 $G --pairs "fsdp=fsdp2_liger" 2>&1 | q
fits 50 && (cd ../old && $OLD python3 $G3 --pairs "fsdp=" --tag step-sync 2>&1) | q
fits 50 && python3 $G3 --pairs "fsdp=" 2>&1 | q
fits 40 && (cd ../old && $OLD python3 $G --pairs "fsdp=" --tag step-sync-again 2>&1) | q
echo total $(el)s
