# Written 2026-12-06 (twelfth session) after call F and before its own run: `LIMIT=500 bash
# benchmarks/results/2026-12-06c-sub-groups/callG.sh`, carrying .carry and .gpu (after `bash benchmarks/gpu_pack.sh --src`),
# timeout 560. Any one GPU.
# Why: zero3's defaults are now lean-config,fused-step,late-wait,sub-groups (call F). Goal 2 (zero3 >= 0.97x fsdp) with
# them, each pair in both orders (the second run of a pair measured up to 2.3% faster, 2026-12-05g-h100.md): the 3B
# shape zero3, fsdp, fsdp, zero3, then llama-1b the same while time lasts. No --experiments: each preset's defaults.
# Predictions (before the run): the 3B shape 0.97-1.00x (call F: 0.988x, one order), no allocator flush warning;
# llama-1b 0.99-1.02x (0.985x before sub-groups, which measured 1.025x there in call F).
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs wg
cd .gpu/src
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
python3 -c "from shardlab.recipes.model import initial_folder as f; [print(f(m, 42)) for m in ('llama-3.2-3b', 'llama-1b')]" 2>&1 | tail -2
echo "folders at $(el)s"
G="python3 benchmarks/gpu_peers.py --out $W/peers --micro-batch-size 8 --steps 20 --warmup 5"
G3="python3 benchmarks/gpu_peers.py --out $W/peers --model llama-3.2-3b --micro-batch-size 4 --steps 20 --warmup 6"
for s in zero3 fsdp fsdp zero3; do fits 70 && $G3 --pairs "$s=" 2>&1 | q; done
for s in zero3 fsdp fsdp zero3; do fits 45 && $G --pairs "$s=" 2>&1 | q; done
grep -c "allocator cache flushes" $W/peers/*.log
python3 - $W/peers <<'P'
import json, sys, glob
for f in sorted(glob.glob(sys.argv[1] + "/*/summary.json")):
    s = json.load(open(f)); print(f.split("/")[-2][:40], s["config"]["model"], [round(x * 1000) for x in s["step_s"]])
P
echo total $(el)s
