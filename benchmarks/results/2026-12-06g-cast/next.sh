# Written 2026-12-06 (sixteenth session) after call X, for the next session (not run: this session's device time was
# spent): `LIMIT=540 bash benchmarks/results/2026-12-06g-cast/next.sh`, then `LIMIT=540 bash
# benchmarks/results/2026-12-06g-cast/next2.sh` on the same machine while it is warm, each carrying .carry and .gpu (after
# `bash benchmarks/gpu_pack.sh --src`), timeout 580. Any one GPU.
# Why: zero3_offload's overlap-comm (DeepSpeed's overlap_comm; its own config has it off) ran 13,377 -> 16,587 tokens/s
# (+24%) on the 3B shape at the selector's batch in one pair on an H100 (call X), the peak the same to the byte. Before it
# becomes zero3_offload's default: its memory points (tests/core/test_memory.py asks for points under the defaults), and
# llama-1b beside the Trainer in both orders, here; the 3B shape in both orders beside the Trainer, in next2.sh.
# Predictions (before the run): the two memory points within 1% of call U's (5,927,544,832 / 25,191,347,200 bytes);
# llama-1b at the selector's batch (16 x 4 on an H100) overlap-comm +5-15% over the default, 1.0-1.15x the Trainer's
# offload + Liger; at R = 0.1 with gpu-grads and lean-config overlap-comm +0-5% (the GPU share no longer crosses PCIe).
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs wy
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
cd .gpu/src
fits 110 && python3 benchmarks/gpu_memory.py --out $W/memory --lanes 2 --budget-s 100 --jobs \
  "llama-1b:zero3_offload:liger:ac:8:exp.gpu-grads.overlap-comm,llama-1b:zero3_offload:liger:noac:8:exp.gpu-grads.overlap-comm" 2>&1 | q
python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-1b', 42))" 2>&1 | tail -1
offload_batch llama-1b
B="python3 benchmarks/gpu_peers.py --out $W/peers --offload-steps 3 --offload-warmup 1 --micro-batch-size $MB --grad-accum $GA"
O="--experiments gpu-grads,overlap-comm"
fits 110 && $B --pairs "zero3_offload=zero3_offload_liger" --extra "$O" --tag overlap-comm 2>&1 | q
fits 60 && $B --pairs "zero3_offload=" 2>&1 | q
fits 60 && $B --pairs "zero3_offload=" --extra "$O" --tag overlap-comm 2>&1 | q
fits 60 && $B --pairs "zero3_offload=" --extra "$O,lean-config --offload-ratio 0.1" --tag overlap-lean-ratio0.1 2>&1 | q
fits 60 && $B --pairs "zero3_offload=" --extra "--experiments gpu-grads,lean-config --offload-ratio 0.1" --tag lean-ratio0.1 2>&1 | q
echo total $(el)s
