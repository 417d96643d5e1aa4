# Issue 21, session 2026-12-05 (second), call 2 (REFUSED: no device was lent for the rest of that session; for the next): (a) zero3_offload's new gpu-cast lever (the CPU-stepped weights copied
# from pinned memory without waiting and cast on the GPU) against stock zero3_offload and the Trainer's offload, mb 8;
# (b) goal 3 at the selector's offload batch (micro-batch 32 x accumulation 2, 131,072 tokens a step): the Trainer's
# offload, ours stock, gpu-cast, --offload-ratio 0.5; (c) goal 4: the 3B shape with fsdp's defaults (auto picks mb 16).
# Predictions (before the run): gpu-cast 1,403 -> ~1,100 ms a step at mb 8 (+25%: 12,265 -> ~15,000 tokens/s, ~1.35x the
# Trainer), losses identical to stock; at 131k tokens a step stock ~1.05x the Trainer, gpu-cast ~1.15x, ratio 0.5 ~1.4x;
# 3B fsdp mb 16: 51-54% MFU.
set -u; T0=$(date +%s); source .gpu/setup.sh
W=/tmp/w2; mkdir -p $W; finish() { cp -r /tmp/logs $W/ 2>/dev/null; tar czf $OUT/w2.tgz -C /tmp w2; echo "tarred at $(el)s"; }
trap finish EXIT
cd .gpu/src
python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-1b', 42))" 2>&1 | tail -1
echo "ready at $(el)s"
q() { grep -v Warn | grep '^{' | cut -c1-300; echo "  at $(el)s"; }
G="python3 benchmarks/gpu_peers.py --out $W/peers --steps 15 --warmup 5 --offload-steps 6 --offload-warmup 2"
$G --micro-batch-size 8 --pairs "zero3_offload=zero3_offload" --extra "--experiments gpu-cast" --tag gpu-cast 2>&1 | q
$G --micro-batch-size 8 --pairs "zero3_offload=" 2>&1 | q
B="python3 benchmarks/gpu_peers.py --out $W/peers --offload-steps 3 --offload-warmup 1 --micro-batch-size 32 --grad-accum 2"
$B --pairs "zero3_offload=zero3_offload" --extra "--experiments gpu-cast" --tag gpu-cast 2>&1 | q
$B --pairs "zero3_offload=" 2>&1 | q
[ $(el) -lt 400 ] && $B --pairs "zero3_offload=" --extra "--offload-ratio 0.5" --tag ratio0.5 2>&1 | q
[ $(el) -lt 470 ] && timeout $((575 - $(el))) python3 benchmarks/gpu_peers.py --out $W/peers --steps 10 --warmup 4 --model llama-3.2-3b --micro-batch-size 16 --pairs "fsdp=" 2>&1 | q
R="python3 -m shardlab.recipes.cli run --model llama-1b --precision bf16-mixed --seq-len 2048 --no-export --metrics none"
[ $(el) -lt 480 ] && { TORCH_LOGS="recompiles,graph_breaks" SHARDLAB_PROFILE=$W/prof-f8c.txt timeout $((575 - $(el))) $R --strategy fsdp --micro-batch-size 8 --max-steps 10 --float8 --compile --kernels torch --output $W/run-f8c > $W/run-f8c.log 2>&1; echo "f8c rc $? at $(el)s"; }
echo total $(el)s
