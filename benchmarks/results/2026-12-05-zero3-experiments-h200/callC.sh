# Issue 21: (1) memory points of zero3 under its new defaults (lean-config + fused-step), the H200 grid's zero3
# points with Liger; (2) zero3 lean+fused against fsdp on the 3B shape again, in the other order (0.970 last call);
# (3) goal 1: fsdp float8 + compile against FSDP2 + Liger; (4) goal 4: the 3B shape's fsdp float8 + compile.
# Predictions (2026-12-05, before the run): memory 0.4 GB (1%) below the stock zero3 points, estimates within 10%;
# 3B zero3/fsdp 0.96-0.99; fsdp f8c / FSDP2+Liger 1.10-1.20 on llama-1b; 3B f8c mb8 55-62% MFU.
set -u; T0=$(date +%s); source .gpu/setup.sh
cd .gpu/src
python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-1b', 42)); print(f('llama-3.2-3b', 42))" 2>&1 | tail -2
echo "ready at $(el)s"
E=exp.lean-config.fused-step
J=""; for m in "llama-1b 4 8" "llama-3.2-3b 2 4"; do set -- $m; for ac in ac noac; do for mb in $2 $3; do J="$J,$1:zero3:liger:$ac:$mb"; done; done; done
python3 benchmarks/gpu_memory.py --out $OUT/memory --lanes 6 --budget-s 100 --jobs "${J#,}" 2>&1 | grep '^{' | cut -c1-260; echo "memory at $(el)s"
O=$OUT/peers; G="python3 benchmarks/gpu_peers.py --out $O --steps 15 --warmup 5"
q() { grep -v Warn | grep '^{' ; echo "  at $(el)s"; }
$G --model llama-3.2-3b --micro-batch-size 4 --pairs "zero3=" 2>&1 | q
$G --model llama-3.2-3b --micro-batch-size 4 --pairs "fsdp=" 2>&1 | q
$G --model llama-1b --micro-batch-size 8 --pairs "fsdp=fsdp2_liger" --extra "--float8 --compile --kernels torch" --tag f8c 2>&1 | q
$G --model llama-3.2-3b --micro-batch-size 8 --pairs "fsdp=" --extra "--float8 --compile --kernels torch --chunked-loss" --tag f8c 2>&1 | q
echo total $(el)s
