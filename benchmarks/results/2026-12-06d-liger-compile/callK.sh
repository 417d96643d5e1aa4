# Written 2026-12-06 (thirteenth session) after call J, before its run: `LIMIT=540 bash
# benchmarks/results/2026-12-06d-liger-compile/callK.sh`, carrying .carry and .gpu, timeout 580. Any one GPU.
# Why: call J (one H100, llama-1b micro-batch 8) measured --compile --kernels liger at 68,107 tokens/s against fsdp's
# defaults' 66,892 / 66,520 and the Trainer's FSDP2 + Liger 62,754 (1.085x), at 33.46 GiB against the Trainer's 33.05;
# capping the partitioner at activation_memory_budget 0.9 took the peak to 27.01 GiB and the speed to 67,242.
# In order: (1) the 3B shape, micro-batch 4: fsdp defaults, the Trainer's FSDP2 + Liger, --compile --kernels liger,
# the same at budget 0.97; (2) llama-1b at budgets 0.97 and 0.985, for the largest budget under the Trainer's peak.
# Predictions (before the run): 3B defaults / Trainer 1.03-1.06x at the same peak (57.12 GiB); compile + Liger's loss
# 1.015-1.03x the defaults at 57.8-58.8 GiB (estimate 58.82; llama-1b measured 0.82 GiB under its estimate); at budget
# 0.97 1-3 GiB less and within 0.5% of budget 1; llama-1b at 0.97: 30-32.5 GiB, 0.985: 31.5-33.3 GiB, both within
# 0.7% of call J's 68,107.
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs wk
HERE=$PWD/benchmarks/results/2026-12-06d-liger-compile
mkdir -p /tmp/sc && cp $HERE/act_budget_sitecustomize.py /tmp/sc/sitecustomize.py
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
cd .gpu/src
python3 -c "from shardlab.recipes.model import initial_folder as f; [print(f(m, 42)) for m in ('llama-3.2-3b', 'llama-1b')]" 2>&1 | tail -2
echo "folders at $(el)s"
G="python3 benchmarks/gpu_peers.py --out $W/peers --micro-batch-size 8 --steps 20 --warmup 5"
G3="python3 benchmarks/gpu_peers.py --out $W/peers --model llama-3.2-3b --micro-batch-size 4 --steps 20 --warmup 6"
C="--compile --kernels liger"
b() { PYTHONPATH=/tmp/sc:$PYTHONPATH SHARDLAB_ACT_BUDGET=$1 "${@:2}"; }
fits 160 && $G3 --pairs "fsdp=fsdp2_liger" 2>&1 | q
fits 100 && $G3 --pairs "fsdp=" --extra="$C" --tag compile-liger-loss 2>&1 | q
fits 100 && b 0.97 $G3 --pairs "fsdp=" --extra="$C" --tag compile-liger-loss-b097 2>&1 | q
fits 60 && b 0.97 $G --pairs "fsdp=" --extra="$C" --tag compile-liger-loss-b097 2>&1 | q
fits 60 && b 0.985 $G --pairs "fsdp=" --extra="$C" --tag compile-liger-loss-b0985 2>&1 | q
python3 - $W/peers <<'P'
import json, sys, glob
for f in sorted(glob.glob(sys.argv[1] + "/*/summary.json")):
    s = json.load(open(f)); print(f.split("/")[-2][:48], [round(x, 4) for x in s.get("losses", [])[:4]], [round(x * 1000) for x in s["step_s"]][:12])
P
echo total $(el)s
