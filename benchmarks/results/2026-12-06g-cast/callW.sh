# Written 2026-12-06 (sixteenth session) before its run: `LIMIT=540 bash benchmarks/results/2026-12-06g-cast/callW.sh`,
# carrying .carry and .gpu (after `bash benchmarks/gpu_pack.sh --src`), timeout 580. Any one GPU.
# Why: goal 3 on the shape users train. zero3_offload (gpu-grads its default since 2026-12-06f) has only been measured
# against the Trainer's offload on llama-1b; the Llama-3.2-3B shape (tied embeddings, 128k vocabulary) never. This call
# runs, at the selector's offload batch for the 3B shape on this GPU (4 x 16 on an H100 by `recipe plan`): the Trainer's
# ZeRO-3 offload + Liger, zero3_offload's defaults (R = 1), and the ratio `recipe plan` names as also fitting (0.75 on
# an H100) with gpu-grads.
# Predictions (before the run): the Trainer 15,000-19,000 tokens/s (about 7-9 s a step: 5-6 s of GPU work and 1.5-2 s
# of CPU Adam over 3.2B parameters); zero3_offload's defaults 0.95-1.05x it; the plan's ratio +3-8% over R = 1; each
# peak within 5% of the estimate.
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs ww
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
cd .gpu/src
python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-3.2-3b', 42))" 2>&1 | tail -1
echo "init at $(el)s"
offload_batch llama-3.2-3b
RATIO=$(python3 -c "import json, re; d = json.load(open('$W/plan.json')); print(next((m.group(1) for t in d['decisions'] for m in [re.search(r'--offload-ratio ([0-9.]+) would also fit', t)] if m), ''))")
echo "the plan's fitting ratio: ${RATIO:-none}"
B="python3 benchmarks/gpu_peers.py --out $W/peers --model llama-3.2-3b --offload-steps 3 --offload-warmup 1 --micro-batch-size $MB --grad-accum $GA"
fits 250 && $B --pairs "zero3_offload=zero3_offload_liger" 2>&1 | q
[ -n "$RATIO" ] && fits 120 && $B --pairs "zero3_offload=" --extra "--offload-ratio $RATIO" --tag ratio$RATIO 2>&1 | q
echo total $(el)s
