# Issue 21 goal 2 (zero3 >= 0.97x our fsdp): zero3's experiments lean-config / fused-step against fsdp, and fsdp
# against FSDP2 + Liger again (goal 1), one H200, alternating in one call. Predictions (written 2026-12-05 before
# the run): zero3 default 0.93x fsdp as last time; lean-config +1%; fused-step +2-4% (the fp32 grad cast and the
# separate clip pass gone); both 0.96-0.99x fsdp on llama-1b, 0.95-0.98x on the 3B shape. fsdp/FSDP2+Liger 1.06-1.10.
set -u; T0=$(date +%s); source .gpu/setup.sh
cd .gpu/src
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-1b', 42)); print(f('llama-3.2-3b', 42))" 2>&1 | tail -2
echo "ready at $(el)s"
O=$OUT/peers; G="python3 benchmarks/gpu_peers.py --out $O --steps 15 --warmup 5"
q() { grep -v Warn | grep '^{' ; echo "  at $(el)s"; }
$G --model llama-1b --micro-batch-size 8 --pairs "fsdp=fsdp2_liger;zero3=" 2>&1 | q
$G --model llama-1b --micro-batch-size 8 --pairs "zero3=" --extra "--experiments lean-config,fused-step" --tag lean+fused 2>&1 | q
$G --model llama-1b --micro-batch-size 8 --pairs "zero3=" --extra "--experiments fused-step" --tag fused 2>&1 | q
$G --model llama-3.2-3b --micro-batch-size 4 --pairs "fsdp=" 2>&1 | q
$G --model llama-3.2-3b --micro-batch-size 4 --pairs "zero3=" --extra "--experiments lean-config,fused-step" --tag lean+fused 2>&1 | q
$G --model llama-1b --micro-batch-size 8 --pairs "zero3=" --extra "--experiments lean-config" --tag lean 2>&1 | q
$G --model llama-3.2-3b --micro-batch-size 4 --pairs "zero3=" 2>&1 | q
echo total $(el)s
