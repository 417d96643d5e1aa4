# Issue 21, for the next session (not run: no H200 could be started on 2026-12-05, fifth session; it needs 84 GiB): goal 3 at the selector's offload batch (llama-1b, mb 32 x accumulation 2
# on the H200 with Liger, 131,072 tokens a step; results/2026-12-05d-h200.md), where the Trainer's offload fits only
# with Liger: (a) zero3_offload --experiments lean-config against the Trainer's offload + Liger; (b) --offload-ratio 0.5;
# (c) the bound: fsdp (nothing offloaded) at the same batch, the most any offload can run; (d) lean-config's memory
# under offload (mb 8, checkpointing on and off).
# Predictions (before the run): lean-config +5-10% (0.98-1.03x the Trainer + Liger); ratio 0.5 ~1.2x; fsdp at the same
# batch ~70,000 tokens/s, so 1.5x the Trainer + Liger (~75,000) is above what the GPU gives without any offload.
set -u; T0=$(date +%s); source .gpu/setup.sh
W=/tmp/wb; mkdir -p $W; finish() { cp -r /tmp/logs $W/ 2>/dev/null; tar czf $OUT/wb.tgz -C /tmp wb; echo "tarred at $(el)s"; }
trap finish EXIT
cd .gpu/src
python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-1b', 42))" 2>&1 | tail -1
q() { grep -v Warn | grep '^{' | cut -c1-300; echo "  at $(el)s"; }
B="python3 benchmarks/gpu_peers.py --out $W/peers --offload-steps 3 --offload-warmup 1 --steps 6 --warmup 2 --micro-batch-size 32 --grad-accum 2"
$B --pairs "zero3_offload=zero3_offload_liger" --extra "--experiments lean-config" --tag lean-config 2>&1 | q
$B --pairs "fsdp=" 2>&1 | q
[ $(el) -lt 400 ] && $B --pairs "zero3_offload=" --extra "--offload-ratio 0.5" --tag ratio0.5 2>&1 | q
[ $(el) -lt 480 ] && python3 benchmarks/gpu_memory.py --out $W/memory --lanes 2 --budget-s 90 --jobs "llama-1b:zero3_offload:liger:ac:8:exp.lean-config,llama-1b:zero3_offload:liger:noac:8:exp.lean-config" 2>&1 | grep '^{' | cut -c1-300
echo total $(el)s
