# Issue 21, session 2026-12-05 (fifth), call A: goal 1 with two levers new in this tree, both fsdp's GPU default here:
# - direct-cast (strategies/fsdp_direct_cast.py): on one rank the fp32 weights cast into the 16-bit ones by one foreach
#   kernel a layer, not a cast and a copy per weight; the reduced gradients kept in their buffer, not copied once more;
# - the step recorder reads each step's loss one step late (recipes/metrics.py), so the GPU no longer waits at every
#   step end for the host to log (SHARDLAB_SETTLE_EVERY_STEP=1: the old wait, for this comparison).
# The Trainer's clock (benchmarks/hf_peer.py) now records CUDA events without a sync of its own; it still logs its loss
# every step (its own host sync), as the table.
# (a) llama-1b mb 8: fsdp (both levers) against the Trainer's FSDP2 + Liger; fsdp --experiments none (no direct-cast);
# fsdp settling every step (no lag); (b) the 3B shape mb 4: fsdp against the Trainer; (c) fsdp's memory points under
# the new default; (d) a profile of fsdp's step (recipes/profile.py now lists where the GPU waits); (e) the Trainer
# logging every 20 steps, and the 3B shape's fsdp --experiments none, if time is left.
# Predictions (before the run): direct-cast: copies 14.7 -> ~7 ms a step, +2.5-3% tokens/s; the late read +0.5-2%;
# together 1B ~71,500 (1.11x the Trainer), 3B ~1.12x; losses of --experiments none identical; peak the same on 1B,
# up to ~0.4 GiB lower on 3B.
set -u; T0=$(date +%s); source .gpu/setup.sh
W=/tmp/wa; mkdir -p $W; finish() { cp -r /tmp/logs $W/ 2>/dev/null; tar czf $OUT/wa.tgz -C /tmp wa; echo "tarred at $(el)s"; }
trap finish EXIT
cd .gpu/src
python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-1b', 42)); print(f('llama-3.2-3b', 42))" 2>&1 | tail -2
echo "ready at $(el)s"
q() { grep -v Warn | grep '^{' | cut -c1-300; echo "  at $(el)s"; }
G="python3 benchmarks/gpu_peers.py --out $W/peers --steps 15 --warmup 6"
$G --micro-batch-size 8 --pairs "fsdp=fsdp2_liger" 2>&1 | q
$G --micro-batch-size 8 --pairs "fsdp=" --extra "--experiments none" --tag stock 2>&1 | q
SHARDLAB_SETTLE_EVERY_STEP=1 $G --micro-batch-size 8 --pairs "fsdp=" --tag settle-every-step 2>&1 | q
G3="python3 benchmarks/gpu_peers.py --out $W/peers --steps 10 --warmup 4 --model llama-3.2-3b"
$G3 --micro-batch-size 4 --pairs "fsdp=fsdp2_liger" 2>&1 | q
[ $(el) -lt 440 ] && python3 benchmarks/gpu_memory.py --out $W/memory --lanes 2 --budget-s 90 --jobs "llama-1b:fsdp:liger:ac:8,llama-1b:fsdp:liger:noac:8" 2>&1 | grep '^{' | cut -c1-300; echo "memory at $(el)s"
R="python3 -m shardlab.recipes.cli run --model llama-1b --precision bf16-mixed --seq-len 2048 --no-export --metrics none"
[ $(el) -lt 480 ] && { SHARDLAB_PROFILE=$W/prof-fsdp.txt timeout 90 $R --strategy fsdp --micro-batch-size 8 --max-steps 10 --output $W/run-prof > $W/run-prof.log 2>&1; echo "profile rc $? at $(el)s"; }
[ $(el) -lt 500 ] && timeout $((585 - $(el))) $G --micro-batch-size 8 --pairs "fsdp=fsdp2_liger" --peer-logging-steps 20 --tag default-2 2>&1 | q
echo total $(el)s
