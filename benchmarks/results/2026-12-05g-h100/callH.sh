# Session 2026-12-05 (seventh), call H: zero3's no-fetch-sync (one-rank fetch without DeepSpeed's host wait, ~25 a step)
# against zero3 without it (--experiments lean-config,fused-step, the previous defaults), beside fsdp, both shapes.
# Predictions (before the run): llama-1b zero3 +5-8% (0.99-1.02x fsdp); 3B shape +3-5% (0.97-1.0x fsdp); peak unchanged.
set -u; T0=$(date +%s); source .gpu/setup.sh
W=/tmp/wh; mkdir -p $W; finish() { tar czf $OUT/wh.tgz -C /tmp wh; echo "tarred at $(el)s"; }
trap finish EXIT
cd .gpu/src
python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-1b', 42)); print(f('llama-3.2-3b', 42))" 2>&1 | tail -2
q() { grep -v Warn | grep '^{' | cut -c1-300; echo "  at $(el)s"; }
G="python3 benchmarks/gpu_peers.py --out $W/peers --steps 15 --warmup 6 --micro-batch-size 8"
$G --pairs "zero3=" --extra "--experiments lean-config,fused-step" --tag before 2>&1 | q
$G --pairs "zero3=;fsdp=" 2>&1 | q
G3="python3 benchmarks/gpu_peers.py --out $W/peers --steps 10 --warmup 4 --model llama-3.2-3b --micro-batch-size 4"
[ $(el) -lt 330 ] && $G3 --pairs "zero3=" --extra "--experiments lean-config,fused-step" --tag before 2>&1 | q
[ $(el) -lt 380 ] && $G3 --pairs "zero3=;fsdp=" 2>&1 | q
R="python3 -m shardlab.recipes.cli run --model llama-1b --precision bf16-mixed --seq-len 2048 --no-export --metrics none --micro-batch-size 8 --max-steps 10"
[ $(el) -lt 480 ] && { SHARDLAB_PROFILE=$W/prof-zero3-1b.txt timeout 80 $R --strategy zero3 --output $W/rz > $W/rz.log 2>&1; echo "zero3 profile rc $? at $(el)s"; }
echo total $(el)s
