# Written 2026-12-06 (nineteenth session) with callA.sh, before either ran: `LIMIT=540 bash
# benchmarks/results/2026-12-06j-direct-grads/callB.sh`, carrying .carry and .gpu, timeout 580, on callA's machine.
# What: the direct-grads lever on the Llama-3.2-3B shape (micro-batch 4), the lever and fsdp's defaults in both orders,
# the Trainer's FSDP2 + Liger first; then the lever's checkpointed memory points (llama-1b micro-batch 8, the 3B shape
# micro-batch 4), side by side.
# Predictions (before the run): lever / defaults +3-4.5% (chunk_cat 4.7 ms, half the clip norm 2.4 ms, 6 of AdamW's 32
# bytes a parameter ~7.4 ms, of a 369 ms step); the peak the same to the byte or lower; step 1's loss the same; goal 1
# on the 3B shape 1.09-1.10x the Trainer. The checkpointed points within 3% of the estimate, which has the peak where it
# was (forward: no gradient is live there, so their 16-bit bytes change nothing); where the measured peak is at the end
# of backward instead, ~2 GiB (llama-1b) / ~6 GiB (3B) under the default's 17.50 / 49.01 GiB.
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs wdgb
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
cd .gpu/src
python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-3.2-3b', 42))" 2>&1 | tail -1
echo "folder at $(el)s"
G3="python3 benchmarks/gpu_peers.py --out $W/peers --model llama-3.2-3b --micro-batch-size 4 --steps 20 --warmup 6"
D=(--extra=--experiments=direct-cast,clip-in-adamw,direct-grads --tag direct-grads)
fits 100 && $G3 --pairs "fsdp=fsdp2_liger" "${D[@]}" 2>&1 | q
fits 60 && $G3 --pairs "fsdp=" 2>&1 | q
fits 60 && $G3 --pairs "fsdp=" "${D[@]}" 2>&1 | q
fits 60 && $G3 --pairs "fsdp=" 2>&1 | q
fits 60 && $G3 --pairs "fsdp=" "${D[@]}" 2>&1 | q
X=exp.direct-cast.clip-in-adamw.direct-grads
fits 70 && python3 benchmarks/gpu_memory.py --out $W/memory --budget-s 70 --lanes 2 \
  --jobs "llama-1b:fsdp:liger:ac:8:$X,llama-3.2-3b:fsdp:liger:ac:4:$X" 2>&1 | q
python3 - $W/peers <<'P'
import json, sys, glob
for f in sorted(glob.glob(sys.argv[1] + "/*/summary.json")):
    s = json.load(open(f)); print(f.split("/")[-2][:40], s["config"]["experiments"], [round(x, 4) for x in s["losses"][:4]])
P
echo total $(el)s
