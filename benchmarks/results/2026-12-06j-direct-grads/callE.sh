# Written 2026-12-06 (nineteenth session) after call C (one H100, where an H200 was asked for), before it ran: `LIMIT=400
# bash benchmarks/results/2026-12-06j-direct-grads/callE.sh`, carrying .carry and .gpu, timeout 420 (the session's last
# device time). Any one GPU.
# Why: call C's one-launch AdamW kept a table entry for every block (537k on llama-1b: 6.4 MB, 18.8 MB on the 3B shape)
# and its peak rose by those bytes (35,490,654,720 against call A's 35,484,304,896). A program now finds its tensor by a
# binary search of the tensors' first blocks (a few KiB). Call D (the 3B shape on the one-launch kernel) never ran:
# this replaces it.
# What: the CUDA tests; the 3B shape (micro-batch 4) with the Trainer's FSDP2 + Liger beside the lever, then fsdp
# without direct-grads, the lever, without; llama-1b (micro-batch 8) once with the lever, for its peak.
# Predictions (before the run): the CUDA tests pass; the 3B shape lever / without +5-6%, goal 1 there 1.10-1.11x, the
# peak at or under the Trainer's (call B: 196 KB under); llama-1b's peak back to call A's within 1 MB (the Trainer's
# + ~2 MB) and 71,000-72,000 tokens/s on an H100 (call C: 71,280 / 71,617).
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs wdge
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
PYTHONPATH=$PYTHONPATH:$PWD timeout 90 python3 -m pytest -q -p no:cacheprovider --noconftest \
  tests/strategies/test_fsdp_direct_grads.py -k "triton or requirements" 2>&1 | tail -2; echo "tests at $(el)s"
cd .gpu/src
python3 -c "from shardlab.recipes.model import initial_folder as f; [print(f(m, 42)) for m in ('llama-3.2-3b', 'llama-1b')]" 2>&1 | tail -2
echo "folders at $(el)s"
G="python3 benchmarks/gpu_peers.py --out $W/peers --micro-batch-size 8 --steps 20 --warmup 5"
G3="python3 benchmarks/gpu_peers.py --out $W/peers --model llama-3.2-3b --micro-batch-size 4 --steps 20 --warmup 6"
D=(--extra=--experiments=direct-cast,clip-in-adamw,direct-grads --tag direct-grads)
O=(--extra=--experiments=direct-cast,clip-in-adamw --tag without)  # fsdp's defaults before direct-grads
fits 100 && $G3 --pairs "fsdp=fsdp2_liger" "${D[@]}" 2>&1 | q
fits 40 && $G3 --pairs "fsdp=" "${O[@]}" 2>&1 | q
fits 40 && $G3 --pairs "fsdp=" "${D[@]}" 2>&1 | q
fits 40 && $G3 --pairs "fsdp=" "${O[@]}" 2>&1 | q
fits 35 && $G --pairs "fsdp=" "${D[@]}" 2>&1 | q
python3 - $W/peers <<'P'
import json, sys, glob
for f in sorted(glob.glob(sys.argv[1] + "/*/summary.json")):
    s = json.load(open(f)); print(f.split("/")[-2][:40], s["config"]["model"], s["config"]["experiments"],
                                  [round(x, 4) for x in s["losses"][:4]])
P
echo total $(el)s
