# Written 2026-12-06 (thirteenth session) before its run: `LIMIT=540 bash benchmarks/results/2026-12-06d-liger-compile/callJ.sh`,
# carrying .carry and .gpu (after `bash benchmarks/gpu_pack.sh --src`), timeout 580. Any one GPU; goal 2's llama-1b
# pair on an H200 only (measured on an H100 last session).
# Why: goal 1 (fsdp >= 1.10x the Trainer's FSDP2 + Liger at no more peak) stands at 1.058x / 1.047x; both stacks run the
# same kernels. --compile --kernels liger (new: the layers compiled with torch's norm, RoPE and SwiGLU, which Inductor
# fuses with the residual adds; the loss Liger's fused one) is the issue's "torch.compile together with Liger's
# kernels". compile with torch's loss measured 1.011x Liger's default on the H200 (2026-12-05d) at +5.6 GiB, most of it
# the logits, which Liger's loss never holds. The estimate counts the compiled layers 1.33 GiB over Liger's (34.28 GiB
# against 32.95), so a second run caps the partitioner's saved activations (activation_memory_budget 0.9, this folder's
# sitecustomize) to come under the Trainer's 33.05 GiB.
# In order: (1) the CUDA-only test of the combination (tests/recipes/test_speed_options.py); (2) llama-1b micro-batch 8:
# fsdp defaults, the Trainer's FSDP2 + Liger, fsdp --compile --kernels liger, the same with budget 0.9, fsdp defaults
# again; (3) on an H200, zero3 defaults (goal 2 with the fsdp rows).
# Predictions (before the run): the test passes; fsdp defaults / Trainer 1.05-1.09x; compile + Liger's loss / defaults
# 1.015-1.035x at 34.1-34.4 GiB; with budget 0.9 at 32.3-33.3 GiB and 0-1.5% slower than without; on an H200 zero3 /
# fsdp 0.98-1.00x.
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs wj
HERE=$PWD/benchmarks/results/2026-12-06d-liger-compile
mkdir -p /tmp/sc && cp $HERE/act_budget_sitecustomize.py /tmp/sc/sitecustomize.py
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
PYTHONPATH=$PYTHONPATH:$PWD timeout 150 python3 -m pytest -q -p no:cacheprovider --noconftest tests/recipes/test_speed_options.py \
  -k compiled_layers_with_ligers 2>&1 | tail -3; echo "test at $(el)s"
cd .gpu/src
python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-1b', 42))" 2>&1 | tail -1
G="python3 benchmarks/gpu_peers.py --out $W/peers --micro-batch-size 8 --steps 20 --warmup 5"
C="--compile --kernels liger"
fits 110 && $G --pairs "fsdp=fsdp2_liger" 2>&1 | q
fits 100 && $G --pairs "fsdp=" --extra="$C" --tag compile-liger-loss 2>&1 | q
fits 100 && PYTHONPATH=/tmp/sc:$PYTHONPATH SHARDLAB_ACT_BUDGET=0.9 $G --pairs "fsdp=" --extra="$C" --tag compile-liger-loss-b0.9 2>&1 | q
fits 50 && $G --pairs "fsdp=" --tag default-again 2>&1 | q
case "$DEV" in *H200*) fits 60 && $G --pairs "zero3=" 2>&1 | q;; esac
python3 - $W/peers <<'P'
import json, sys, glob
for f in sorted(glob.glob(sys.argv[1] + "/*/summary.json")):
    s = json.load(open(f)); print(f.split("/")[-2][:48], s.get("losses", [])[:4], [round(x * 1000) for x in s["step_s"]][:12])
P
echo total $(el)s
