# Written 2026-12-06 (twelfth session) before its run: `LIMIT=540 bash benchmarks/results/2026-12-06c-sub-groups/callF.sh`,
# carrying .carry and .gpu (after `bash benchmarks/gpu_pack.sh --src`), timeout 580. Any one GPU.
# Why: call E (2026-12-06b-h100/callE.sh, this session, one H100) profiled the 3B shape: zero3's profiled steps ran
# 379.6 ms against fsdp's 376.4 (no allocator flush while profiling), while its timed steps alternate 375 / 420 ms with
# one allocator flush every two steps. zero3 runs with Lightning's sub_group_size 1e12: the step casts the whole
# partition's fp32 gradient at once, one 12.9 GB block on the 3B shape, allocated and freed every step among the freed
# activations. The sub-groups lever (sub_group_size 2e8) makes it 16 sub-groups of at most 1.47 GiB.
# In order, while time lasts: (1) the 3B pair zero3 + sub-groups, fsdp, zero3 defaults; (2) the memory points zero3's
# defaults with sub-groups need (llama-1b micro-batch 8, Liger, checkpointing on and off) and the 3B shape with
# checkpointing (micro-batch 4); (3) llama-1b zero3 + sub-groups against zero3 defaults.
# Predictions (before the run): with sub-groups no flush warning and zero3's 3B steps flat (~375 ms on an H100), zero3 /
# fsdp 0.97-1.00x on the 3B shape, sub-groups / defaults 1.03-1.06x there (an H200, no flushes: 0.99-1.01x); llama-1b
# +-1%; peaks: llama-1b checkpointing 18.9-19.6 GiB (20.553 without the lever; estimate 19.54), no checkpointing 36.872
# (unchanged: backward's), the 3B shape with checkpointing 50.5-52.1 GiB (59.91 without; estimate 52.04).
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs wf
cd .gpu/src
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
python3 -c "from shardlab.recipes.model import initial_folder as f; [print(f(m, 42)) for m in ('llama-3.2-3b', 'llama-1b')]" 2>&1 | tail -2
echo "folders at $(el)s"
D=lean-config,fused-step,late-wait
G="python3 benchmarks/gpu_peers.py --out $W/peers --micro-batch-size 8 --steps 20 --warmup 5"
G3="python3 benchmarks/gpu_peers.py --out $W/peers --model llama-3.2-3b --micro-batch-size 4 --steps 20 --warmup 6"
fits 70 && $G3 --pairs "zero3=" --extra "--experiments $D,sub-groups" --tag sub-groups 2>&1 | q
fits 55 && $G3 --pairs "fsdp=" 2>&1 | q
fits 70 && $G3 --pairs "zero3=" 2>&1 | q
grep -c "allocator cache flushes" $W/peers/*.log
fits 110 && python3 benchmarks/gpu_memory.py --out $W/memory --lanes 2 --budget-s 100 --jobs "llama-1b:zero3:liger:ac:8:exp.$(echo $D | tr , .).sub-groups,llama-1b:zero3:liger:noac:8:exp.$(echo $D | tr , .).sub-groups" 2>&1 | q
fits 90 && { $G --pairs "zero3=" --extra "--experiments $D,sub-groups" --tag sub-groups 2>&1 | q; $G --pairs "zero3=" 2>&1 | q; }
fits 80 && python3 benchmarks/gpu_memory.py --out $W/memory3 --lanes 1 --budget-s 75 --jobs "llama-3.2-3b:zero3:liger:ac:4:exp.$(echo $D | tr , .).sub-groups" 2>&1 | q
python3 - $W/peers <<'P'
import json, sys, glob
for f in sorted(glob.glob(sys.argv[1] + "/*/summary.json")):
    s = json.load(open(f)); print(f.split("/")[-2][:40], [round(x * 1000) for x in s["step_s"]])
P
echo total $(el)s
