# Written 2026-12-06 (eighteenth session) before its run: `LIMIT=540 bash
# benchmarks/results/2026-12-06i-fused-adds/callAB.sh`, carrying .carry and .gpu (after `bash benchmarks/gpu_pack.sh
# --src`), timeout 590. Any one GPU.
# Why: issue 21 goal 1 (fsdp >= 1.10x the Trainer's FSDP2 + Liger at no more peak) is 2-5% short. The decoder layers'
# bf16 adds were 154 launches and 9.9 ms of llama-1b's 242 ms step, 10.6 ms of the 3B shape's 375 (2026-12-06e-idle
# profiles). --fused-adds (recipes/fused_adds.py) folds 6 of each layer's 7 into the kernels beside them: the q/k/v and
# gate/up input gradients summed by accumulating GEMMs, the attention's residual add in Liger's fused add + RMSNorm,
# the MLP's in down_proj's GEMM. This runs its CUDA test (Liger's path against Liger's plain layers, fp32), then fsdp's
# defaults and --fused-adds beside the Trainer's FSDP2 + Liger on both shapes, each pair in both orders, and the
# lever's memory point with checkpointing (the runs without it are points already).
# Predictions (before the run): --fused-adds / defaults +1.5-3% on llama-1b (micro-batch 8), +1-2% on the 3B shape
# (micro-batch 4); the peak within 0.1 GiB of the default's (the same tensors saved); losses: step 1 the same, later
# steps within bf16 noise (3B step 4 11.83-11.95 over ten default runs); goal 1 1.08-1.10x on llama-1b, 1.05-1.065x on
# the 3B shape. Not met on the 3B shape.
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs wab
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
PYTHONPATH=$PYTHONPATH:$PWD timeout 150 python3 -m pytest -q -p no:cacheprovider --noconftest \
  tests/recipes/test_fused_adds.py -k "ligers or keep_the_loss or summing" 2>&1 | tail -3; echo "tests at $(el)s"
cd .gpu/src
python3 -c "from shardlab.recipes.model import initial_folder as f; [print(f(m, 42)) for m in ('llama-1b', 'llama-3.2-3b')]" 2>&1 | tail -2
echo "folders at $(el)s"
G="python3 benchmarks/gpu_peers.py --out $W/peers --micro-batch-size 8 --steps 20 --warmup 5"
G3="python3 benchmarks/gpu_peers.py --out $W/peers --model llama-3.2-3b --micro-batch-size 4 --steps 20 --warmup 6"
F=(--extra "--fused-adds" --tag fused-adds)
fits 45 && $G --pairs "fsdp=" 2>&1 | q
fits 45 && $G --pairs "fsdp=" "${F[@]}" 2>&1 | q
fits 45 && $G --pairs "fsdp=fsdp2_liger" "${F[@]}" 2>&1 | q
fits 45 && $G --pairs "fsdp=" 2>&1 | q
fits 70 && $G3 --pairs "fsdp=" "${F[@]}" 2>&1 | q
fits 70 && $G3 --pairs "fsdp=fsdp2_liger" 2>&1 | q
fits 70 && $G3 --pairs "fsdp=" "${F[@]}" 2>&1 | q
fits 60 && python3 benchmarks/gpu_memory.py --out $W/memory --budget-s 60 --jobs "llama-1b:fsdp:liger:ac:8:fused-adds" 2>&1 | q
python3 - $W/peers <<'P'
import json, sys, glob
for f in sorted(glob.glob(sys.argv[1] + "/*/summary.json")):
    s = json.load(open(f)); print(f.split("/")[-2][:40], s["config"]["model"], s["config"].get("fused_adds"),
                                  [round(x, 4) for x in s["losses"][:4]])
P
echo total $(el)s
