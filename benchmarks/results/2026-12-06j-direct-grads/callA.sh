# Written 2026-12-06 (nineteenth session) before it ran: `LIMIT=540 bash benchmarks/results/2026-12-06j-direct-grads/callA.sh`,
# carrying .carry and .gpu (after `bash benchmarks/gpu_pack.sh --src`), timeout 580. Any one GPU.
# What: fsdp's direct-grads lever (strategies/fsdp_direct_grads.py): on one rank the 16-bit gradients go straight to an
# AdamW (a Triton kernel, strategies/adamw_kernel.py) that upcasts them as it reads them, with no copy into FSDP2's
# reduce buffer, no fp32 cast and no gradient write-back. Its CUDA test first (the kernel against torch's fused AdamW),
# then llama-1b micro-batch 8: the lever (--experiments direct-cast,clip-in-adamw,direct-grads, over fsdp's defaults) and
# the defaults in both orders, the Trainer's FSDP2 + Liger beside them; a profile of the lever's step if time is left.
# Predictions (before the run): the CUDA test passes; lever / defaults +1.5-2.5% (chunk_cat 1.6 ms, half the clip norm
# 0.8 ms, 6 of AdamW's 32 bytes a parameter ~2.6 ms, of a 237 ms step); the peak the same to the byte or lower (the
# peak is at the loss, before any gradient); step 1's loss the same, later steps within fp32 rounding of the Triton
# kernel (step 4 within 0.01); goal 1 on llama-1b 1.09-1.10x the Trainer.
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs wdga
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
PYTHONPATH=$PYTHONPATH:$PWD timeout 120 python3 -m pytest -q -p no:cacheprovider --noconftest \
  tests/strategies/test_fsdp_direct_grads.py -k triton 2>&1 | tail -3; echo "tests at $(el)s"
cd .gpu/src
python3 -c "from shardlab.recipes.model import initial_folder as f; [print(f(m, 42)) for m in ('llama-1b', 'llama-3.2-3b')]" 2>&1 | tail -2
echo "folders at $(el)s"
G="python3 benchmarks/gpu_peers.py --out $W/peers --micro-batch-size 8 --steps 20 --warmup 5"
D=(--extra=--experiments=direct-cast,clip-in-adamw,direct-grads --tag direct-grads)
fits 45 && $G --pairs "fsdp=" "${D[@]}" 2>&1 | q
fits 45 && $G --pairs "fsdp=" 2>&1 | q
fits 75 && $G --pairs "fsdp=fsdp2_liger" "${D[@]}" 2>&1 | q
fits 45 && $G --pairs "fsdp=" 2>&1 | q
R="python3 -m shardlab.recipes.cli run --strategy fsdp --precision bf16-mixed --seq-len 2048 --no-export --metrics none --max-steps 10"
fits 80 && { SHARDLAB_PROFILE=$W/profile-fsdp-1b.txt timeout 80 $R --model llama-1b --micro-batch-size 8 \
  --experiments direct-cast,clip-in-adamw,direct-grads --output $W/rp > $W/rp.log 2>&1; echo "profile rc $? at $(el)s"; head -30 $W/profile-fsdp-1b.txt; }
python3 - $W/peers <<'P'
import json, sys, glob
for f in sorted(glob.glob(sys.argv[1] + "/*/summary.json")):
    s = json.load(open(f)); print(f.split("/")[-2][:40], s["config"]["experiments"], [round(x, 4) for x in s["losses"][:4]])
P
echo total $(el)s
