# Written 2026-12-06 (twelfth session) after call G and before its own run: `LIMIT=230 bash
# benchmarks/results/2026-12-06c-sub-groups/callI.sh`, carrying .carry and .gpu, timeout 250. Any one GPU.
# Why: zero3's defaults changed speed three times since its ratio to raw Lightning was measured (1.401x on one H200,
# 2026-12-03, gpu_strategies.json: before lean-config and fused-step, late-wait and sub-groups). The rule: a default
# that changes speed re-measures what depends on it. zero3 against its raw-Lightning anchor, llama-1b micro-batch 8,
# raw first, then shardlab (benchmarks/gpu_strategies.py, one round).
# Prediction (before the run): 1.55-1.75x (1.401x then; the levers since measured +17%, +1.5% and +2.5% on llama-1b).
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs wi
cd .gpu/src
nvidia-smi --query-gpu=name --format=csv,noheader
python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-1b', 42))" 2>&1 | tail -1
echo "folder at $(el)s"
fits 110 && python3 benchmarks/gpu_strategies.py --out $W/strategies --strategies zero3 --rounds 1 --steps 20 2>&1 | grep -v Warn | tail -4
cat $W/strategies/gpu_strategies.md 2>/dev/null | head -12
echo total $(el)s
