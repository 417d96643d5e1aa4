# Written 2026-12-06 (fourteenth session) after call O, before its run: `LIMIT=545 bash
# benchmarks/results/2026-12-06e-idle/callP.sh`, carrying .carry and .gpu (after `bash benchmarks/gpu_pack.sh --src`
# and .gpu/old made from 157bec5 by `git archive`), timeout 590. Any one GPU.
# Why: call O's profile put 2.5-3 ms a step of fsdp's device idle at each step boundary: StepRecorder synced at every
# step's end, and the GPU then waited while the host fetched and copied the next batch and began its forward. The
# recorder now marks the step's end with a CUDA event and reads the step before (157bec5 + this change). This call
# runs the CUDA-only test of that (no stream sync at a step's end), then fsdp before (.gpu/old) and after, and the
# Trainer's FSDP2 + Liger logging every step (a sync at each, as before) and every 10 steps (its strongest setting).
# Predictions (before the run): after / before +0.8-1.5% on llama-1b (micro-batch 8) and +0.5-1.0% on the 3B shape
# (micro-batch 4), the same peak; the Trainer logging every 10 steps 0-1% over every step; goal 1 (fsdp / the Trainer)
# 1.07-1.09x on llama-1b and 1.045-1.06x on the 3B shape against the Trainer logging every step.
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs wp
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
fits 100 && python3 $G --pairs "fsdp=fsdp2_liger" 2>&1 | q
fits 80 && python3 $G --pairs "fsdp=fsdp2_liger" --peer-logging-steps 10 --tag again 2>&1 | q
fits 55 && (cd ../old && $OLD python3 $G3 --pairs "fsdp=" --tag step-sync 2>&1) | q
fits 120 && python3 $G3 --pairs "fsdp=fsdp2_liger" 2>&1 | q
fits 45 && (cd ../old && $OLD python3 $G --pairs "fsdp=" --tag step-sync-again 2>&1) | q
echo total $(el)s
