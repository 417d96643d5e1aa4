# Issue 21, for the next session (not run: no device was lent on 2026-12-05, eighth session). Three calls on one warm
# machine: `PART=a bash .gpu/next.sh` (~300 s), `PART=b ...` (~350 s), then `DEFAULTS=... PART=c ...` (~450 s).
# Parts a (llama-1b) and b (the 3B shape): each lever against itself within one run (SHARDLAB_AB, recipes/lever_ab.py:
# 5 warm-up steps, then off/on/on/off blocks of 4 steps, each block's first step left out, 15 counted steps a side at
# 45 steps), so that no order or machine effect falls between the sides: zero3's param-lists, no-nvtx and
# no-fetch-sync on both shapes (goal 2: which become defaults?), and fsdp's defaults direct-cast and clip-in-adamw on
# llama-1b, measured so far only across runs (+2.1%; +0.8-1.3%).
# Part c: a zero3 profile naming Python functions (SHARDLAB_PROFILE_PYTHON), the two memory points zero3's new defaults
# need (DEFAULTS: its lever list joined by dots, e.g. DEFAULTS=lean-config.fused-step.param-lists.no-nvtx; none of the
# three allocates, so the peak should not move), and goal 1's pairs with the Trainer in both orders.
# Setup as in 2026-12-05g-h100/callH.sh (.gpu/setup.sh from benchmarks/gpu_setup.sh; .gpu/src a copy
# of the tree; this file copied to .gpu/next.sh).
# Predictions (before the run), each 95% interval within +-0.5% on the GPU:
# - param-lists 1.01-1.02x on llama-1b (117 walks a step answered from the lists, ~3.3 ms of Python on the CPU, where
#   it measured 1.035-1.065x, while the GPU waits ~44 ms a step for the host), 1.005-1.01x on the 3B shape;
# - no-nvtx 1.005-1.015x on llama-1b (1,195 ranges a step, ~3 us of Python each), 1.002-1.008x on the 3B shape;
# - no-fetch-sync 1.000-1.010x on llama-1b (the device idled as long with it), 1.00-1.02x on the 3B shape;
# - direct-cast 1.015-1.025x; clip-in-adamw 1.005-1.013x;
# - profile: DeepSpeed's per-gradient reduce path (stage3.py reduce_ready_partitions_and_remove_grads and below) and the
#   coordinator's release lead the Python functions, not the fetch;
# - fsdp against FSDP2 + Liger: 1.05-1.07x on llama-1b (no fsdp default changed since call F's 1.058x).
set -u; T0=$(date +%s); source .gpu/setup.sh
PART=${PART:-a}; W=/tmp/wab$PART; mkdir -p $W; finish() { tar czf $OUT/wab$PART.tgz -C /tmp wab$PART; echo "tarred at $(el)s"; }
trap finish EXIT
cd .gpu/src
python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-1b', 42)); print(f('llama-3.2-3b', 42) if '$PART' == 'b' else '')" 2>&1 | tail -2
q() { grep -v Warn | grep '^{' | cut -c1-400; echo "  at $(el)s"; }
G="python3 benchmarks/gpu_peers.py --out $W/peers --steps 40 --warmup 5 --micro-batch-size 8"
G3="python3 benchmarks/gpu_peers.py --out $W/peers --steps 40 --warmup 5 --model llama-3.2-3b --micro-batch-size 4"
Z="--experiments lean-config,fused-step"
if [ "$PART" = a ]; then  # llama-1b: zero3's three, fsdp's two (~300 s)
  for lever in param-lists no-nvtx no-fetch-sync; do
    SHARDLAB_AB=$lever $G --pairs "zero3=" --extra "$Z,$lever" --tag ab-$lever 2>&1 | q
  done
  SHARDLAB_AB=direct-cast $G --pairs "fsdp=" --tag ab-direct-cast 2>&1 | q
  SHARDLAB_AB=clip-in-adamw $G --pairs "fsdp=" --tag ab-clip-in-adamw 2>&1 | q
elif [ "$PART" = b ]; then  # the 3B shape: zero3's three (~350 s with the 3B weights written first)
  for lever in param-lists no-nvtx no-fetch-sync; do
    SHARDLAB_AB=$lever $G3 --pairs "zero3=" --extra "$Z,$lever" --tag ab-$lever 2>&1 | q
  done
else
  SHARDLAB_PROFILE=$W/profile-zero3-1b-python.txt SHARDLAB_PROFILE_PYTHON=1 python3 -m shardlab.recipes.cli run --strategy zero3 --model llama-1b --precision bf16-mixed --micro-batch-size 8 --seq-len 2048 --max-steps 10 --no-export --metrics none --output $W/prof-z3 > $W/prof-z3.log 2>&1; echo "profile rc $? at $(el)s"
  [ -n "${DEFAULTS:-}" ] && python3 benchmarks/gpu_memory.py --out $W/memory --lanes 2 --budget-s 100 --jobs "llama-1b:zero3:liger:ac:8:exp.$DEFAULTS,llama-1b:zero3:liger:noac:8:exp.$DEFAULTS" 2>&1 | grep '^{' | cut -c1-300
  [ $(el) -lt 330 ] && python3 benchmarks/gpu_peers.py --out $W/peers --steps 15 --warmup 6 --micro-batch-size 8 --pairs "fsdp=fsdp2_liger" --rounds 2 2>&1 | q
fi
echo total $(el)s
