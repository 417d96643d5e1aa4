# Written 2026-12-06 (thirteenth session) after call L, before its run: `LIMIT=520 bash
# benchmarks/results/2026-12-06d-liger-compile/callM.sh`, carrying .carry and .gpu, timeout 560. Any one GPU.
# Why: goal 3 asks zero3_offload >= 1.5x the Trainer's ZeRO-3 optimizer offload also at the batch the selector picks for
# offload. On the H200 (2026-12-05d) the Trainer + Liger ran 50,046 tokens/s there, and nothing offloaded (fsdp) was
# estimated at ~70,000: 1.5x would be above what the GPU gives with no offload at all. That bound was never measured in
# the same call. This call asks the selector for its offload batch on this GPU, then runs at it: zero3_offload's
# defaults, the Trainer's offload + Liger, fsdp (the bound: no offload), and zero3_offload --offload-ratio 0.5; then,
# while time lasts, zero3 against the Trainer's ZeRO-3 + Liger at micro-batch 8 (1.57x on an H200, 2026-12-04b; not
# re-measured since zero3's four defaults).
# Predictions (before the run): the selector takes zero3_offload at 131,072 tokens a step (micro-batch 16-32);
# zero3_offload 0.9-1.0x the Trainer + Liger; fsdp 1.3-1.5x it, below 1.5x; ratio 0.5 1.1-1.3x; zero3 / the Trainer's
# ZeRO-3 + Liger 1.6-1.8x.
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs wm
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
cd .gpu/src
python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-1b', 42))" 2>&1 | tail -1
python3 -m shardlab.recipes.cli plan --strategy auto --offload optimizer --model llama-1b --json > $W/plan.json 2> $W/plan.err
read CH MB GA < <(python3 -c "import json; d = json.load(open('$W/plan.json')); print(d['choice'], d['micro_batch_size'], d['grad_accum'])")
echo "selector: $CH micro-batch $MB x accumulation $GA at $(el)s"; python3 -c "import json; [print(' ', r) for r in json.load(open('$W/plan.json'))['reasons']]"
B="python3 benchmarks/gpu_peers.py --out $W/peers --offload-steps 3 --offload-warmup 1 --steps 6 --warmup 2 --micro-batch-size $MB --grad-accum $GA"
fits 170 && $B --pairs "zero3_offload=zero3_offload_liger" 2>&1 | q
fits 70 && $B --pairs "fsdp=" 2>&1 | q
fits 90 && $B --pairs "zero3_offload=" --extra "--offload-ratio 0.5" --tag ratio0.5 2>&1 | q
fits 140 && python3 benchmarks/gpu_peers.py --out $W/peers --micro-batch-size 8 --steps 20 --warmup 5 --pairs "zero3=zero3_liger" 2>&1 | q
echo total $(el)s
