# Issue 21, session 2026-12-05 (sixth), call B: goals 1 and 2 with this session's recorder: the batch pinned (its copy
# to the GPU waited for the whole queue from pageable memory) and each step's loss and time read one step late (CUDA
# events, pinned copy), so the host never waits for the GPU inside training. A/B against the tree before it (HEAD,
# .gpu/base: reads each step at its end, pageable batches). Then every host sync left in fsdp's step, by Python stack
# (torch's sync debug mode through a diagnostic sitecustomize, not part of shardlab).
# Predictions (before the run): +1.5-3% on llama-1b over HEAD (the Trainer logging every 20 steps instead of every step
# ran +3.2%), 1B fsdp ~1.10-1.12x the Trainer logging every step; 3B ~1.05x; zero3 ~0.96x fsdp.
set -u; T0=$(date +%s); source .gpu/setup.sh
W=/tmp/wb2; mkdir -p $W; finish() { cp -r /tmp/logs $W/ 2>/dev/null; tar czf $OUT/wb2.tgz -C /tmp wb2; echo "tarred at $(el)s"; }
trap finish EXIT
GS=$PWD/.gpu/sync;  # sync_sitecustomize.py (this folder) as .gpu/sync/sitecustomize.py
 mkdir -p /tmp/slbase; ln -sfn $PWD/.gpu/base /tmp/slbase/shardlab
BASE="PYTHONPATH=/tmp/site:/tmp/slbase:$PWD/.gpu/base"
cd .gpu/src
python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-1b', 42)); print(f('llama-3.2-3b', 42))" 2>&1 | tail -2
q() { grep -v Warn | grep '^{' | cut -c1-300; echo "  at $(el)s"; }
G="python3 benchmarks/gpu_peers.py --out $W/peers --steps 15 --warmup 6"
$G --micro-batch-size 8 --pairs "fsdp=fsdp2_liger" 2>&1 | q
env $BASE $G --micro-batch-size 8 --pairs "fsdp=" --tag head 2>&1 | q
$G --micro-batch-size 8 --pairs "zero3=" 2>&1 | q
G3="python3 benchmarks/gpu_peers.py --out $W/peers --steps 10 --warmup 4 --model llama-3.2-3b"
$G3 --micro-batch-size 4 --pairs "fsdp=fsdp2_liger" 2>&1 | q
[ $(el) -lt 430 ] && $G3 --micro-batch-size 4 --pairs "zero3=" 2>&1 | q
R="python3 -m shardlab.recipes.cli run --model llama-1b --precision bf16-mixed --seq-len 2048 --no-export --metrics none"
mkdir -p $W/sync
[ $(el) -lt 520 ] && { SYNC_OUT=$W/sync PYTHONPATH=$GS:$PYTHONPATH timeout 60 $R --strategy fsdp --micro-batch-size 8 --max-steps 6 --output $W/run-sync > $W/run-sync.log 2>&1; echo "sync rc $? at $(el)s"; }
echo total $(el)s
