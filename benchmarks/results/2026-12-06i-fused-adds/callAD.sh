# Written 2026-12-06 (eighteenth session) right after callAB.sh, whose --fused-adds runs never started: gpu_peers.py
# read `--extra "--fused-adds"` as a flag of its own and refused it (`--extra=--fused-adds` passes it). `LIMIT=470 bash
# benchmarks/results/2026-12-06i-fused-adds/callAD.sh`, carrying .carry and .gpu, timeout 560. Any one GPU.
# Predictions: as callAB.sh's (--fused-adds / defaults +1.5-3% on llama-1b, +1-2% on the 3B shape; goal 1
# 1.08-1.10x on llama-1b, 1.05-1.065x on the 3B shape).
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs wad
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
cd .gpu/src
python3 -c "from shardlab.recipes.model import initial_folder as f; [print(f(m, 42)) for m in ('llama-1b', 'llama-3.2-3b')]" 2>&1 | tail -2
echo "folders at $(el)s"
G="python3 benchmarks/gpu_peers.py --out $W/peers --micro-batch-size 8 --steps 20 --warmup 5"
G3="python3 benchmarks/gpu_peers.py --out $W/peers --model llama-3.2-3b --micro-batch-size 4 --steps 20 --warmup 6"
F=(--extra=--fused-adds --tag fused-adds)
fits 40 && $G --pairs "fsdp=" "${F[@]}" 2>&1 | q
fits 40 && $G --pairs "fsdp=" 2>&1 | q
fits 70 && $G --pairs "fsdp=fsdp2_liger" "${F[@]}" 2>&1 | q
fits 40 && $G --pairs "fsdp=" 2>&1 | q
fits 60 && $G3 --pairs "fsdp=" "${F[@]}" 2>&1 | q
fits 60 && $G3 --pairs "fsdp=" 2>&1 | q
fits 60 && $G3 --pairs "fsdp=" "${F[@]}" 2>&1 | q
fits 60 && $G3 --pairs "fsdp=" 2>&1 | q
python3 - $W/peers <<'P'
import json, sys, glob
for f in sorted(glob.glob(sys.argv[1] + "/*/summary.json")):
    s = json.load(open(f)); print(f.split("/")[-2][:40], s["config"]["model"], s["config"].get("fused_adds"),
                                  [round(x, 4) for x in s["losses"][:4]])
P
echo total $(el)s
