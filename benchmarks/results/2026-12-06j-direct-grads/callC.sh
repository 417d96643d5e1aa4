# Written 2026-12-06 (nineteenth session) after calls A and B (one H200), before it ran: `LIMIT=540 bash
# benchmarks/results/2026-12-06j-direct-grads/callC.sh`, carrying .carry and .gpu, timeout 580. Any one GPU.
# Why: in call A's profile of the lever (llama-1b), AdamW was 201 Triton launches, one a tensor, and the GPU waited on
# the host between them: 2.01 ms a step in 191 gaps while the host was in the optimizer's step. The kernel is now one
# launch a gradient dtype (strategies/adamw_kernel.py: each program finds its tensor in a table), whole blocks vectorized.
# What: its CUDA test; llama-1b micro-batch 8, the lever and fsdp's defaults in both orders with the Trainer's FSDP2 +
# Liger between; the lever's profile.
# Predictions (before the run): the CUDA tests pass; the profile's idle inside the optimizer step under 0.3 ms (from
# 2.01), its AdamW kernel no slower than 7.35 ms a step; lever / defaults +5-6% (call A: +4.0% / +5.1%); goal 1 on
# llama-1b 1.10-1.11x the Trainer (call A: 1.098x / 1.100x), the peak the Trainer's + 2 MB as before.
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs wdgc
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
PYTHONPATH=$PYTHONPATH:$PWD timeout 120 python3 -m pytest -q -p no:cacheprovider --noconftest \
  tests/strategies/test_fsdp_direct_grads.py -k "triton or requirements" 2>&1 | tail -3; echo "tests at $(el)s"
cd .gpu/src
python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-1b', 42))" 2>&1 | tail -1
echo "folder at $(el)s"
G="python3 benchmarks/gpu_peers.py --out $W/peers --micro-batch-size 8 --steps 20 --warmup 5"
D=(--extra=--experiments=direct-cast,clip-in-adamw,direct-grads --tag direct-grads)
O=(--extra=--experiments=direct-cast,clip-in-adamw --tag without)  # fsdp's defaults before direct-grads
fits 45 && $G --pairs "fsdp=" "${D[@]}" 2>&1 | q
fits 45 && $G --pairs "fsdp=" "${O[@]}" 2>&1 | q
fits 75 && $G --pairs "fsdp=fsdp2_liger" "${D[@]}" 2>&1 | q
fits 45 && $G --pairs "fsdp=" "${O[@]}" 2>&1 | q
R="python3 -m shardlab.recipes.cli run --strategy fsdp --precision bf16-mixed --seq-len 2048 --no-export --metrics none --max-steps 10"
fits 60 && { SHARDLAB_PROFILE=$W/profile-fsdp-1b.txt timeout 60 $R --model llama-1b --micro-batch-size 8 \
  --experiments direct-cast,clip-in-adamw,direct-grads --output $W/rp > $W/rp.log 2>&1; echo "profile rc $? at $(el)s";
  grep -E "optimizer|adamw|^device idle|DirectGrads" $W/profile-fsdp-1b.txt | head -12; }
python3 - $W/peers <<'P'
import json, sys, glob
for f in sorted(glob.glob(sys.argv[1] + "/*/summary.json")):
    s = json.load(open(f)); print(f.split("/")[-2][:40], s["config"]["experiments"], [round(x, 4) for x in s["losses"][:4]])
P
echo total $(el)s
