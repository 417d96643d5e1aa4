# Issue 21, session 2026-12-05 (fourth), call B: (a) zero3_offload's gpu-cast lever (the CPU-stepped weights copied
# from pinned memory without waiting and cast on the GPU) against stock zero3_offload and the Trainer's offload, mb 8;
# (b) goal 3 at the selector's offload batch (`recipe plan --strategy auto --offload optimizer` on the GPU, llama-1b:
# 131,072 tokens a step, checkpointing off; it resolved micro-batch 32 x accumulation 2 on this H200 with Liger): the Trainer's offload, ours stock,
# gpu-cast; (c) gpu-cast's memory points (mb 8, checkpointing
# on and off), for its default if it wins.
# Predictions (before the run): gpu-cast 1,403 -> ~1,100 ms a step at mb 8 (+25%: 12,265 -> ~15,000 tokens/s, ~1.35x the
# Trainer), losses identical to stock; at 131k tokens a step stock ~1.05x the Trainer, gpu-cast ~1.15x,
# gpu-cast's peak within 1 GiB of stock's (one 1e8-parameter sub-group's staging).
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
# the selector's offload batch for this GPU (`recipe plan --strategy auto --offload optimizer`), as the plan resolves it here
SEL=$(python3 -m shardlab.recipes.cli plan --model llama-1b --strategy auto --offload optimizer --seq-len 2048 --json 2>/dev/null | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['micro_batch_size'], d['grad_accum'])")
set -- ${SEL:-16 4}; echo "selector's offload batch: mb $1 x accum $2"
B="python3 benchmarks/gpu_peers.py --out $W/peers --offload-steps 3 --offload-warmup 1 --micro-batch-size $1 --grad-accum $2"
$B --pairs "zero3_offload=zero3_offload" --extra "--experiments gpu-cast" --tag gpu-cast 2>&1 | q
$B --pairs "zero3_offload=" 2>&1 | q
[ $(el) -lt 470 ] && python3 benchmarks/gpu_memory.py --out $W/memory --lanes 2 --budget-s 95 --jobs "llama-1b:zero3_offload:liger:ac:8:exp.gpu-cast,llama-1b:zero3_offload:liger:noac:8:exp.gpu-cast" 2>&1 | grep '^{' | cut -c1-300; echo "memory at $(el)s"
echo total $(el)s
