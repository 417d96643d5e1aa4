# Issue 21, for the next session (not run: no device was lent on 2026-12-05, eighth session). Two calls on one warm
# machine: `PART=a bash .gpu/next.sh` (~420 s), then `PART=b bash .gpu/next.sh` (~450 s).
# Part a: each lever against itself within one run (SHARDLAB_AB, recipes/lever_ab.py: 5 warm-up steps, then
# off/on/on/off blocks of 4 steps, each block's first step left out, 15 counted steps a side at 45 steps), so that no
# order or machine effect falls between the sides: zero3's no-fetch-sync and no-nvtx on both shapes (goal 2: does
# either become a default?), then fsdp's defaults direct-cast and clip-in-adamw on llama-1b, measured so far only across
# runs (+2.1%; +0.8-1.3%).
# Part b: a zero3 profile naming Python functions (SHARDLAB_PROFILE_PYTHON), the two memory points a new zero3 default
# needs (run the jobs of the lever part a kept), and goal 1's pairs with the Trainer in both orders.
# Setup as in 2026-12-05g-h100/callH.sh (.gpu/setup.sh from 2026-12-05-zero3-experiments-h200/setup.sh; .gpu/src a copy
# of the tree; this file copied to .gpu/next.sh).
# Predictions (before the run): no-fetch-sync 1.000-1.010x on llama-1b (the device idled as long with it), 1.00-1.02x on
# the 3B shape; no-nvtx 1.005-1.015x on llama-1b (~1,200 ranges a step, ~3 us of Python each, while the GPU waits for
# the host), 1.002-1.008x on the 3B shape (longer steps); direct-cast 1.015-1.025x; clip-in-adamw 1.005-1.013x; each 95%
# interval within +-0.5% on the GPU. Profile: DeepSpeed's per-gradient reduce path (stage3.py
# reduce_ready_partitions_and_remove_grads and below) and the coordinator's release lead the Python functions, not the
# fetch. fsdp against FSDP2 + Liger: 1.05-1.07x on llama-1b (no default changed since call F's 1.058x).
set -u; T0=$(date +%s); source .gpu/setup.sh
PART=${PART:-a}; W=/tmp/wab$PART; mkdir -p $W; finish() { tar czf $OUT/wab$PART.tgz -C /tmp wab$PART; echo "tarred at $(el)s"; }
trap finish EXIT
cd .gpu/src
python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-1b', 42)); print(f('llama-3.2-3b', 42))" 2>&1 | tail -2
q() { grep -v Warn | grep '^{' | cut -c1-400; echo "  at $(el)s"; }
G="python3 benchmarks/gpu_peers.py --out $W/peers --steps 40 --warmup 5 --micro-batch-size 8"
G3="python3 benchmarks/gpu_peers.py --out $W/peers --steps 40 --warmup 5 --model llama-3.2-3b --micro-batch-size 4"
if [ "$PART" = a ]; then
  for lever in no-fetch-sync no-nvtx; do
    SHARDLAB_AB=$lever $G --pairs "zero3=" --extra "--experiments lean-config,fused-step,$lever" --tag ab-$lever 2>&1 | q
    SHARDLAB_AB=$lever $G3 --pairs "zero3=" --extra "--experiments lean-config,fused-step,$lever" --tag ab-$lever 2>&1 | q
  done
  [ $(el) -lt 480 ] && SHARDLAB_AB=direct-cast $G --pairs "fsdp=" --tag ab-direct-cast 2>&1 | q
  [ $(el) -lt 530 ] && SHARDLAB_AB=clip-in-adamw $G --pairs "fsdp=" --tag ab-clip-in-adamw 2>&1 | q
else
  SHARDLAB_PROFILE=$W/profile-zero3-1b-python.txt SHARDLAB_PROFILE_PYTHON=1 python3 -m shardlab.recipes.cli run --strategy zero3 --model llama-1b --precision bf16-mixed --micro-batch-size 8 --seq-len 2048 --max-steps 10 --no-export --metrics none --output $W/prof-z3 > $W/prof-z3.log 2>&1; echo "profile rc $? at $(el)s"
  python3 benchmarks/gpu_memory.py --out $W/memory --lanes 2 --budget-s 100 --jobs "llama-1b:zero3:liger:ac:8:exp.lean-config.fused-step.no-fetch-sync.no-nvtx,llama-1b:zero3:liger:noac:8:exp.lean-config.fused-step.no-fetch-sync.no-nvtx" 2>&1 | grep '^{' | cut -c1-300
  [ $(el) -lt 330 ] && python3 benchmarks/gpu_peers.py --out $W/peers --steps 15 --warmup 6 --micro-batch-size 8 --pairs "fsdp=fsdp2_liger" --rounds 2 2>&1 | q
fi
echo total $(el)s
