# Issue 21, session 2026-12-05 (fourth), call A: torch.compile now compiles all of llama-1b's 22 decoder layers (before
# this fix a training forward built Hugging Face's key/value cache, and its per-layer slots made Dynamo recompile the
# layer code once per layer up to its limit of 8: 14 layers ran eager under --compile and --float8 + --compile).
# (a) llama-1b mb 8, one pair: the Trainer's FSDP2 + Liger, shardlab fsdp default (Liger), fsdp --compile --kernels
# torch, fsdp --float8 --compile --kernels torch; (b) the 3B shape: fsdp default at mb 16 (goal 4) and float8 + compile.
# Predictions (before the run): compile 59,003 -> ~66,000 tokens/s (0.97x Liger's); float8 + compile 33,119 ->
# ~80,000 (1.2x the Trainer); 3B fsdp mb 16 51-54% MFU, float8 + compile mb 8 ~60%.
set -u; T0=$(date +%s); source .gpu/setup.sh
W=/tmp/wa; mkdir -p $W; finish() { cp -r /tmp/logs $W/ 2>/dev/null; tar czf $OUT/wa.tgz -C /tmp wa; echo "tarred at $(el)s"; }
trap finish EXIT
cd .gpu/src
python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-1b', 42)); print(f('llama-3.2-3b', 42))" 2>&1 | tail -2
echo "ready at $(el)s"
q() { grep -v Warn | grep '^{' | cut -c1-300; echo "  at $(el)s"; }
G="python3 benchmarks/gpu_peers.py --out $W/peers --steps 15 --warmup 6"
$G --micro-batch-size 8 --pairs "fsdp=fsdp2_liger" --extra "--compile --kernels torch" --tag compile 2>&1 | q
TORCH_LOGS="recompiles,graph_breaks" $G --micro-batch-size 8 --pairs "fsdp=" --extra "--float8 --compile --kernels torch" --tag f8c 2>&1 | q
$G --micro-batch-size 8 --pairs "fsdp=" 2>&1 | q
G3="python3 benchmarks/gpu_peers.py --out $W/peers --steps 8 --warmup 4 --model llama-3.2-3b"
[ $(el) -lt 400 ] && $G3 --micro-batch-size 16 --pairs "fsdp=" 2>&1 | q
[ $(el) -lt 460 ] && timeout $((580 - $(el))) $G3 --micro-batch-size 8 --pairs "fsdp=" --extra "--float8 --compile --kernels torch --chunked-loss" --tag f8c 2>&1 | q
echo total $(el)s
