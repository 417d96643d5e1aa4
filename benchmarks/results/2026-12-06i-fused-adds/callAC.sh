# Written 2026-12-06 (eighteenth session) before its run, to follow callAB.sh on the same machine: `LIMIT=400 bash
# benchmarks/results/2026-12-06i-fused-adds/callAC.sh`, carrying .carry and .gpu, timeout 480 (the session's device time
# left after callAD.sh: the 3B pair runs in one order only). Any one GPU.
# Why: goal 2 asks zero3 >= 0.97x fsdp (0.992-0.996x today). If --fused-adds becomes fsdp's default, zero3 needs it as
# well to stay there: under ZeRO-3 bf16 the weights are bf16 and the lever acts as under fsdp, with DeepSpeed's fetch
# around each projection. This runs zero3's defaults and --fused-adds on both shapes, each pair in both orders, and the
# checkpointed memory points of fsdp and zero3 with the lever.
# Predictions (before the run): zero3 --fused-adds / defaults +1.5-3% on llama-1b, +1-2% on the 3B shape, the peak
# within 0.1 GiB; the memory points within 3% of the estimate (the same tensors saved as without the lever).
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs wac
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
cd .gpu/src
python3 -c "from shardlab.recipes.model import initial_folder as f; [print(f(m, 42)) for m in ('llama-1b', 'llama-3.2-3b')]" 2>&1 | tail -2
G="python3 benchmarks/gpu_peers.py --out $W/peers --micro-batch-size 8 --steps 20 --warmup 5"
G3="python3 benchmarks/gpu_peers.py --out $W/peers --model llama-3.2-3b --micro-batch-size 4 --steps 20 --warmup 6"
F=(--extra=--fused-adds --tag fused-adds)
python3 benchmarks/gpu_memory.py --out $W/memory --budget-s 30 --lanes 2 \
  --jobs "llama-1b:zero3:liger:ac:8:fused-adds,llama-3.2-3b:fsdp:liger:ac:4:fused-adds" 2>&1 | q
fits 60 && $G --pairs "zero3=" 2>&1 | q
fits 60 && $G --pairs "zero3=" "${F[@]}" 2>&1 | q
fits 75 && $G3 --pairs "zero3=" "${F[@]}" 2>&1 | q
fits 75 && $G3 --pairs "zero3=" 2>&1 | q
fits 45 && $G --pairs "zero3=" "${F[@]}" 2>&1 | q
fits 45 && $G --pairs "zero3=" 2>&1 | q
python3 - $W/peers <<'P'
import json, sys, glob
for f in sorted(glob.glob(sys.argv[1] + "/*/summary.json")):
    s = json.load(open(f)); print(f.split("/")[-2][:40], s["config"]["model"], s["config"].get("fused_adds"),
                                  [round(x, 4) for x in s["losses"][:4]])
P
echo total $(el)s
