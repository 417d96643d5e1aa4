# Issue 21, for the next session (not yet run): goal 3 at the selector's offload batch (mb 32 x accumulation 2 on the
# H200) against the Trainer's offload with Liger: shardlab's default, --experiments lean-config, --offload-ratio 0.5;
# goal 1 on the 3B shape (fsdp default against FSDP2 + Liger at micro-batch 4); lean-config's memory under offload.
# Predictions (before the run): lean-config +5-10% (0.98-1.03x the Trainer + Liger); ratio 0.5 ~1.3x; 3B fsdp 1.02-1.08x.
set -u; T0=$(date +%s); source .gpu/setup.sh
W=/tmp/wn; mkdir -p $W; finish() { cp -r /tmp/logs $W/ 2>/dev/null; tar czf $OUT/wn.tgz -C /tmp wn; echo "tarred at $(el)s"; }
trap finish EXIT
cd .gpu/src
python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-1b', 42)); print(f('llama-3.2-3b', 42))" 2>&1 | tail -2
q() { grep -v Warn | grep '^{' | cut -c1-300; echo "  at $(el)s"; }
B="python3 benchmarks/gpu_peers.py --out $W/peers --offload-steps 3 --offload-warmup 1 --micro-batch-size 32 --grad-accum 2"
$B --pairs "zero3_offload=zero3_offload_liger" --extra "--experiments lean-config" --tag lean-config 2>&1 | q
$B --pairs "zero3_offload=" --extra "--offload-ratio 0.5" --tag ratio0.5 2>&1 | q
[ $(el) -lt 380 ] && python3 benchmarks/gpu_peers.py --out $W/peers --steps 10 --warmup 4 --model llama-3.2-3b --micro-batch-size 4 --pairs "fsdp=fsdp2_liger" 2>&1 | q
[ $(el) -lt 480 ] && python3 benchmarks/gpu_memory.py --out $W/memory --lanes 2 --budget-s 90 --jobs "llama-1b:zero3_offload:liger:ac:8:exp.lean-config,llama-1b:zero3_offload:liger:noac:8:exp.lean-config" 2>&1 | grep '^{' | cut -c1-300
echo total $(el)s
