# Issue 21, for the next session (not run: no device was lent on 2026-12-05, eighth session). Each lever against itself
# within one run (SHARDLAB_AB, recipes/lever_ab.py: 5 warm-up steps, then off/on/on/off blocks of 4 steps, each block's
# first step left out, 15 counted steps a side at 45 steps), so that no order or machine effect falls between the sides:
# (a) zero3's no-fetch-sync on both shapes: does it become a default (goal 2)?; (b) fsdp's defaults direct-cast and
# clip-in-adamw, measured so far only across runs (+2.1%; +0.8-1.3%); then (c) the two memory points no-fetch-sync needs
# as a default, and (d) goal 1's pairs with the Trainer, in both orders. Setup as in 2026-12-05g-h100/callH.sh
# (.gpu/setup.sh from 2026-12-05-zero3-experiments-h200/setup.sh; .gpu/src a copy of the tree).
# Predictions (before the run): no-fetch-sync 1.000-1.010x on llama-1b (the device idled as long with it), 1.00-1.02x on
# the 3B shape; direct-cast 1.015-1.025x; clip-in-adamw 1.005-1.013x; each 95% interval under +-0.5% on the GPU.
set -u; T0=$(date +%s); source .gpu/setup.sh
W=/tmp/wab; mkdir -p $W; finish() { tar czf $OUT/wab.tgz -C /tmp wab; echo "tarred at $(el)s"; }
trap finish EXIT
cd .gpu/src
python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-1b', 42)); print(f('llama-3.2-3b', 42))" 2>&1 | tail -2
q() { grep -v Warn | grep '^{' | cut -c1-400; echo "  at $(el)s"; }
G="python3 benchmarks/gpu_peers.py --out $W/peers --steps 40 --warmup 5 --micro-batch-size 8"
G3="python3 benchmarks/gpu_peers.py --out $W/peers --steps 40 --warmup 5 --model llama-3.2-3b --micro-batch-size 4"
Z="--experiments lean-config,fused-step,no-fetch-sync"
SHARDLAB_AB=no-fetch-sync $G --pairs "zero3=" --extra "$Z" --tag ab-no-fetch-sync 2>&1 | q
SHARDLAB_AB=no-fetch-sync $G3 --pairs "zero3=" --extra "$Z" --tag ab-no-fetch-sync 2>&1 | q
SHARDLAB_AB=direct-cast $G --pairs "fsdp=" --tag ab-direct-cast 2>&1 | q
SHARDLAB_AB=clip-in-adamw $G --pairs "fsdp=" --tag ab-clip-in-adamw 2>&1 | q
[ $(el) -lt 330 ] && python3 benchmarks/gpu_memory.py --out $W/memory --lanes 2 --budget-s 100 --jobs "llama-1b:zero3:liger:ac:8:exp.lean-config.fused-step.no-fetch-sync,llama-1b:zero3:liger:noac:8:exp.lean-config.fused-step.no-fetch-sync" 2>&1 | grep '^{' | cut -c1-300
[ $(el) -lt 420 ] && python3 benchmarks/gpu_peers.py --out $W/peers --steps 15 --warmup 6 --micro-batch-size 8 --pairs "fsdp=fsdp2_liger" --rounds 2 2>&1 | q
echo total $(el)s
