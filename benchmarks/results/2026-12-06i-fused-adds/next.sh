# Written 2026-12-06 (eighteenth session) for a later one (not run: this session's device time was spent):
# `LIMIT=540 bash benchmarks/results/2026-12-06i-fused-adds/next.sh`, carrying .carry and .gpu (after `bash
# benchmarks/gpu_pack.sh --src`), timeout 580. Any one GPU.
# Why: --fused-adds is fsdp's and zero3's default (2026-12-06i-fused-adds.md), but zero3 on the 3B shape ran one order
# only and its default run drifted (371-444 ms a step), and zero2 (DeepSpeed bf16: bf16 weights, where the lever acts)
# was never measured. This runs each pair in both orders: zero3 on the 3B shape (micro-batch 4), zero2 on llama-1b
# (micro-batch 8). The runs without the lever pass --no-fused-adds (zero3's default is on; zero2's off).
# Predictions (before the run): zero3 3B +0.5-1.5% (fsdp's was +0.6-1.0%), the peak the same to the byte; zero2
# llama-1b +1-2.5%, the peak the same. Where zero2 holds, its default follows with its memory points (gpu_memory.py
# llama-1b:zero2:liger:ac:8:fused-adds and the timed run), as fsdp's and zero3's did.
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs wnext
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
cd .gpu/src
python3 -c "from shardlab.recipes.model import initial_folder as f; [print(f(m, 42)) for m in ('llama-1b', 'llama-3.2-3b')]" 2>&1 | tail -2
G="python3 benchmarks/gpu_peers.py --out $W/peers --micro-batch-size 8 --steps 20 --warmup 5"
G3="python3 benchmarks/gpu_peers.py --out $W/peers --model llama-3.2-3b --micro-batch-size 4 --steps 20 --warmup 6"
ON=(--extra=--fused-adds --tag fused-adds); OFF=(--extra=--no-fused-adds --tag plain)
for s in OFF ON ON OFF; do declare -n X=$s; fits 75 && $G3 --pairs "zero3=" "${X[@]}" 2>&1 | q; done
for s in ON OFF OFF ON; do declare -n X=$s; fits 45 && $G --pairs "zero2=" "${X[@]}" 2>&1 | q; done
grep -c "allocator cache flushes" $W/peers/*.log
echo total $(el)s
