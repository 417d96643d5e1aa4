# Written 2026-12-06 (eleventh session) after call C, before this call ran. Call C (one H100) measured zero3's 3B-shape
# steps alternating ~377 / ~418 ms, with DeepSpeed's "allocator cache flushes" warning at most steps (peak 68.2 GiB
# allocated of 79.2): the allocator frees its cache and retries under memory pressure. fsdp (57.1 GiB) ran ~378 ms flat.
# Lever: PyTorch's expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True), which grows segments in place
# instead of failing on fragmentation. Each setting runs with and without it in this one call.
# Predictions (before the run): 3B zero3 with it ~377-385 ms flat, no flush warning, 1.03-1.06x its run without;
# 3B fsdp and llama-1b (no pressure) within +-1%; max_memory_allocated unchanged (same allocations).
set -u; T0=$(date +%s); source .gpu/setup.sh; LIMIT=${LIMIT:-480}
W=/tmp/wd; mkdir -p $W; finish() { cp -r /tmp/logs $W/ 2>/dev/null; tar czf $OUT/wd.tgz -C /tmp wd; echo "tarred at $(el)s"; }
trap finish EXIT
fits() { [ $(( $(el) + $1 )) -le $LIMIT ]; }
cd .gpu/src
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-3.2-3b', 42)); print(f('llama-1b', 42))" 2>&1 | tail -2
echo "folders at $(el)s"
q() { grep -v Warn | grep '^{' | cut -c1-300; echo "  at $(el)s"; }
L=lean-config,fused-step,late-wait; X=PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
G="python3 benchmarks/gpu_peers.py --out $W/peers --micro-batch-size 8 --steps 21 --warmup 6"
G3="python3 benchmarks/gpu_peers.py --out $W/peers --model llama-3.2-3b --micro-batch-size 4 --steps 20 --warmup 6"
fits 70 && env $X $G3 --pairs "zero3=" --extra "--experiments $L" --tag expseg 2>&1 | q
fits 70 && $G3 --pairs "zero3=" --extra "--experiments $L" --tag late-wait 2>&1 | q
fits 50 && env $X $G3 --pairs "fsdp=" --tag expseg 2>&1 | q
fits 50 && $G3 --pairs "fsdp=" 2>&1 | q
fits 45 && env $X $G --pairs "zero3=" --extra "--experiments $L" --tag expseg 2>&1 | q
fits 35 && env $X $G --pairs "fsdp=" --tag expseg 2>&1 | q
fits 45 && $G --pairs "zero3=" --extra "--experiments $L" --tag late-wait 2>&1 | q
fits 35 && $G --pairs "fsdp=" 2>&1 | q
grep -c "cache flushes" $W/peers/*.log
echo total $(el)s
