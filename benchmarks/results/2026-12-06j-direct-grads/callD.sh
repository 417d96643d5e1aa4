# Written 2026-12-06 (nineteenth session) with callC.sh, before either ran: `LIMIT=540 bash
# benchmarks/results/2026-12-06j-direct-grads/callD.sh`, carrying .carry and .gpu, timeout 580, on callC's machine.
# What: the one-launch AdamW of callC.sh on the Llama-3.2-3B shape (micro-batch 4): the Trainer's FSDP2 + Liger beside
# the lever, fsdp's defaults, the lever again, the defaults again.
# Predictions (before the run): lever / defaults +5-6% (call B: +5.1-8.0%, one order drifting); goal 1 on the 3B shape
# 1.10-1.11x (call B: 1.091x / 1.093x / 1.107x), the peak at or under the Trainer's as in call B.
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs wdgd
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
cd .gpu/src
python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-3.2-3b', 42))" 2>&1 | tail -1
echo "folder at $(el)s"
G3="python3 benchmarks/gpu_peers.py --out $W/peers --model llama-3.2-3b --micro-batch-size 4 --steps 20 --warmup 6"
D=(--extra=--experiments=direct-cast,clip-in-adamw,direct-grads --tag direct-grads)
O=(--extra=--experiments=direct-cast,clip-in-adamw --tag without)  # fsdp's defaults before direct-grads
fits 100 && $G3 --pairs "fsdp=fsdp2_liger" "${D[@]}" 2>&1 | q
fits 60 && $G3 --pairs "fsdp=" "${O[@]}" 2>&1 | q
fits 60 && $G3 --pairs "fsdp=" "${D[@]}" 2>&1 | q
fits 60 && $G3 --pairs "fsdp=" "${O[@]}" 2>&1 | q
fits 60 && $G3 --pairs "fsdp=" "${D[@]}" 2>&1 | q
python3 - $W/peers <<'P'
import json, sys, glob
for f in sorted(glob.glob(sys.argv[1] + "/*/summary.json")):
    s = json.load(open(f)); print(f.split("/")[-2][:40], s["config"]["experiments"], [round(x, 4) for x in s["losses"][:4]])
P
echo total $(el)s
