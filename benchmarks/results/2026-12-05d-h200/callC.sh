# Issue 21, session 2026-12-05 (fourth), call C: goal 3 at the selector's offload batch (mb 32 x accumulation 2 as
# `recipe plan --strategy auto --offload optimizer` resolves it on this H200), where call B's Trainer ZeRO-3 offload ran
# out of memory (no Liger, no checkpointing): against the Trainer's offload with Liger at that batch, then both at
# mb 16 x 4 (the same 131,072 tokens a step).
# Predictions (before the run): the Trainer + Liger fits at mb 32 and runs ~40,000 tokens/s (ours 46,093: ~1.15x).
set -u; T0=$(date +%s); source .gpu/setup.sh
W=/tmp/wb; mkdir -p $W; finish() { cp -r /tmp/logs $W/ 2>/dev/null; tar czf $OUT/wb.tgz -C /tmp wb; echo "tarred at $(el)s"; }
trap finish EXIT
cd .gpu/src
python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-1b', 42))" 2>&1 | tail -1
q() { grep -v Warn | grep '^{' | cut -c1-300; echo "  at $(el)s"; }
B="python3 benchmarks/gpu_peers.py --out $W/peers --offload-steps 3 --offload-warmup 1"
$B --micro-batch-size 32 --grad-accum 2 --pairs "zero3_offload=zero3_offload_liger" 2>&1 | q
[ $(el) -lt 170 ] && $B --micro-batch-size 16 --grad-accum 4 --pairs "zero3_offload=zero3_offload" 2>&1 | q
echo total $(el)s
