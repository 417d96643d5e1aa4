# Written 2026-12-07 (nineteenth session) for a later one (not run: this session's device time was spent):
# `LIMIT=540 bash benchmarks/results/2026-12-06j-direct-grads/next.sh`, carrying .carry and .gpu (after `bash
# benchmarks/gpu_pack.sh --src`), timeout 580. Best on an H200, the GPU goal 1 names (ask kind nvidia-h200).
# Why: direct-grads' final kernel (a binary search for each program's tensor) ran on the 3B shape only (call E); its
# llama-1b peak is not measured, and fsdp's llama-1b peak has sat ~1.9 MB over the Trainer's FSDP2 + Liger since before
# the lever (2026-12-06i). This runs llama-1b (micro-batch 8) with fsdp's defaults beside the Trainer, both orders, and
# a snapshot of the allocator at fsdp's peak (gpu_memory.py --snapshot; OUT/snapshot-*.json names the tensors live
# there); then the 3B shape (micro-batch 4) beside the Trainer, if the GPU is an H200.
# Predictions (before the run): llama-1b 1.10-1.11x the Trainer, the peak call A's (35,484,304,896 bytes) within 16 KB,
# i.e. still ~1.9 MB over the Trainer's; the snapshot names the ~2 MB (a guess: the loss's or the step recorder's small
# tensors, or the clip's norms kept to the peak); the 3B shape on an H200 1.10-1.12x at or under the Trainer's peak.
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs wnext
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
cd .gpu/src
python3 -c "from shardlab.recipes.model import initial_folder as f; [print(f(m, 42)) for m in ('llama-1b', 'llama-3.2-3b')]" 2>&1 | tail -2
G="python3 benchmarks/gpu_peers.py --out $W/peers --micro-batch-size 8 --steps 20 --warmup 5"
G3="python3 benchmarks/gpu_peers.py --out $W/peers --model llama-3.2-3b --micro-batch-size 4 --steps 20 --warmup 6"
fits 75 && $G --pairs "fsdp=fsdp2_liger" 2>&1 | q
fits 40 && $G --pairs "fsdp=" 2>&1 | q
fits 60 && python3 benchmarks/gpu_memory.py --out $W/memory --budget-s 60 --snapshot "llama-1b:fsdp:liger:noac:8" 2>&1 | q
case "$DEV" in *H200*) fits 100 && $G3 --pairs "fsdp=fsdp2_liger" 2>&1 | q; fits 40 && $G3 --pairs "fsdp=" 2>&1 | q;; esac
echo total $(el)s
