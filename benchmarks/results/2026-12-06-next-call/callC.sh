# Written 2026-12-06 (tenth session) and not run: no machine started (2026-12-06-next-call.md). For the next session,
# after `bash benchmarks/gpu_pack.sh`: `LIMIT=540 bash benchmarks/results/2026-12-06-next-call/callC.sh` (timeout 580).
# What late-wait needs to become a zero3 default, then goal 2's pairs.
# late-wait measured 1.015x (1.012-1.022) on llama-1b in the ninth session (2026-12-05i-late-wait.md); param-lists 1.005x
# (0.999-1.013: not kept). In order, while time lasts (LIMIT seconds in all): (1) the memory points zero3's defaults with
# late-wait need (llama-1b micro-batch 8, Liger, checkpointing on and off); (2) late-wait's A/B on the 3B shape; (3) goal
# 2's pair on llama-1b with lean-config,fused-step,late-wait; (4) the same pair on the 3B shape; (5) no-nvtx's A/B.
# Predictions (before the run): memory points as lean-config,fused-step's (2026-12-05 call C: checkpointing 20.553 GiB,
# none 36.872 GiB; late-wait adds one device scalar); 3B late-wait 1.005-1.02x; goal 2 with late-wait 0.98-1.0x on llama-1b,
# 0.96-0.99x on the 3B shape; no-nvtx 1.005-1.015x.
set -u; T0=$(date +%s); source .gpu/setup.sh; LIMIT=${LIMIT:-560}
W=/tmp/wc; mkdir -p $W; finish() { cp -r /tmp/logs $W/ 2>/dev/null; tar czf $OUT/wc.tgz -C /tmp wc; echo "tarred at $(el)s"; }
trap finish EXIT
fits() { [ $(( $(el) + $1 )) -le $LIMIT ]; }
cd .gpu/src
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-1b', 42))" 2>&1 | tail -1
L=lean-config,fused-step,late-wait
python3 benchmarks/gpu_memory.py --out $W/memory --lanes 2 --budget-s 100 --jobs "llama-1b:zero3:liger:ac:8:exp.lean-config.fused-step.late-wait,llama-1b:zero3:liger:noac:8:exp.lean-config.fused-step.late-wait" 2>&1 | grep '^{' | cut -c1-300
echo "memory at $(el)s"
q() { grep -v Warn | grep '^{' | cut -c1-400; echo "  at $(el)s"; }
G="python3 benchmarks/gpu_peers.py --out $W/peers --micro-batch-size 8"
G3="python3 benchmarks/gpu_peers.py --out $W/peers --model llama-3.2-3b --micro-batch-size 4"
python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-3.2-3b', 42))" 2>&1 | tail -1
echo "3B folder at $(el)s"
fits 90 && SHARDLAB_AB=late-wait $G3 --steps 48 --warmup 5 --pairs "zero3=" --extra "--experiments $L" --tag ab-late-wait 2>&1 | q
fits 90 && { $G --steps 15 --warmup 6 --pairs "zero3=" --extra "--experiments $L" --tag late-wait 2>&1 | q; $G --steps 15 --warmup 6 --pairs "fsdp=" 2>&1 | q; }
fits 110 && { $G3 --steps 10 --warmup 4 --pairs "zero3=" --extra "--experiments $L" --tag late-wait 2>&1 | q; $G3 --steps 10 --warmup 4 --pairs "fsdp=" 2>&1 | q; }
fits 60 && SHARDLAB_AB=no-nvtx $G --steps 64 --warmup 5 --pairs "zero3=" --extra "--experiments $L,no-nvtx" --tag ab-no-nvtx 2>&1 | q
echo total $(el)s
