# Written 2026-12-07 (twentieth session) for a call after callF.sh, not run (no GPU could be had):
# `LIMIT=550 bash benchmarks/results/2026-12-07-closing/callG.sh`, carrying .carry and .gpu, timeout 590. Any one GPU
# (the 3B shape's goal 1 names an H200).
# Why: the Llama-3.2-3B shape (tied, 128k vocabulary), micro-batch 4: goal 1 (fsdp against the Trainer's FSDP2 + Liger)
# and goal 2 (zero3 against fsdp) with zero3's direct-grads (this session), and its memory point with checkpointing.
# What: fsdp, the Trainer's FSDP2 + Liger, zero3 + direct-grads, zero3's defaults, fsdp, zero3 + direct-grads; the 3B
# memory point of zero3 + direct-grads with checkpointing.
# Predictions (before the run): fsdp 1.09-1.13x the Trainer at or under its peak; zero3's defaults 0.92-0.95x fsdp,
# direct-grads +5-7% over them and 0.97-1.00x fsdp; its checkpointed peak ~0.8 GB under the defaults' (call Y's
# 2026-12-06c point less a 2e8 sub-group's fp32 gradient), the estimate within 3%.
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs wg
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
cd .gpu/src
python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-3.2-3b', 42))" 2>&1 | tail -1
echo "folder at $(el)s"
G3="python3 benchmarks/gpu_peers.py --out $W/peers --model llama-3.2-3b --micro-batch-size 4 --steps 20 --warmup 6"
D=(--extra=--experiments=lean-config,fused-step,late-wait,sub-groups,direct-grads --tag direct-grads)
fits 100 && $G3 --pairs "fsdp=fsdp2_liger" 2>&1 | q
fits 40 && $G3 --pairs "zero3=" "${D[@]}" 2>&1 | q
fits 40 && $G3 --pairs "zero3=" 2>&1 | q
fits 40 && $G3 --pairs "fsdp=" 2>&1 | q
fits 40 && $G3 --pairs "zero3=" "${D[@]}" 2>&1 | q
X=exp.lean-config.fused-step.late-wait.sub-groups.direct-grads
fits 70 && python3 benchmarks/gpu_memory.py --out $W/memory --budget-s 70 --lanes 1 \
  --jobs "llama-3.2-3b:zero3:liger:ac:4:$X" 2>&1 | q
python3 - $W/peers <<'P'
import json, sys, glob
for f in sorted(glob.glob(sys.argv[1] + "/*/summary.json")):
    s = json.load(open(f)); print(f.split("/")[-2][:40], s["config"]["experiments"], [round(x, 4) for x in s["losses"][:4]])
P
echo total $(el)s
