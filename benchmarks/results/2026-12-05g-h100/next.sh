# Superseded by 2026-12-05h-ab/next.sh (the same question, each lever switched within one run); kept as written.
# Issue 21, for the next session (not run): does zero3's no-fetch-sync (offered since 2026-12-05, seventh session) become
# a default? Call H measured it only second in each pair, and calls I/I2 showed the second of two runs 0.4-2.3% faster.
# Here each shape runs without / with / with / without (ABBA) in one call, then the two memory points a default needs
# (checkpointing on and off, llama-1b micro-batch 8). Setup as in callH.sh (.gpu/setup.sh, .gpu/src a copy of the tree).
# Predictions (before the run): llama-1b 0 to +1% (the device idled as long with it: DeepSpeed's hooks, not the syncs,
# keep the GPU waiting); 3B shape 0 to +2%; the peak the same to the byte (call H).
set -u; T0=$(date +%s); source .gpu/setup.sh
W=/tmp/wn2; mkdir -p $W; finish() { tar czf $OUT/wn2.tgz -C /tmp wn2; echo "tarred at $(el)s"; }
trap finish EXIT
cd .gpu/src
python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-1b', 42)); print(f('llama-3.2-3b', 42))" 2>&1 | tail -2
q() { grep -v Warn | grep '^{' | cut -c1-300; echo "  at $(el)s"; }
G="python3 benchmarks/gpu_peers.py --out $W/peers --steps 15 --warmup 6 --micro-batch-size 8"
G3="python3 benchmarks/gpu_peers.py --out $W/peers --steps 10 --warmup 4 --model llama-3.2-3b --micro-batch-size 4"
for g in "$G" "$G3"; do
  $g --pairs "zero3=" --tag stock 2>&1 | q
  $g --pairs "zero3=" --extra "--experiments lean-config,fused-step,no-fetch-sync" --tag no-fetch-sync 2>&1 | q
  $g --pairs "zero3=" --extra "--experiments lean-config,fused-step,no-fetch-sync" --tag no-fetch-sync 2>&1 | q
  $g --pairs "zero3=" --tag stock 2>&1 | q
done
[ $(el) -lt 480 ] && python3 benchmarks/gpu_memory.py --out $W/memory --lanes 2 --budget-s 100 --jobs "llama-1b:zero3:liger:ac:8:exp.lean-config.fused-step.no-fetch-sync,llama-1b:zero3:liger:noac:8:exp.lean-config.fused-step.no-fetch-sync" 2>&1 | grep '^{' | cut -c1-300
echo total $(el)s
