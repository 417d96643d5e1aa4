# Issue 21, session 2026-12-05 (sixth), call C (warm, right after B): fsdp's clip-in-adamw lever (the clip folded into
# the fused AdamW; strategies/fsdp_clip_in_adamw.py) against fsdp's default, llama-1b mb 8 and the 3B shape mb 4; then
# where the GPU still waits in fsdp's step on llama-1b (recipes/profile.py, idle time now split by phase).
# Predictions (before the run): clip-in-adamw +0.5-1% (1B: the multiply pass is 3.2 ms of a ~250 ms step on the H100,
# the AdamW kernel then writes the gradient back), 3B +1-1.5% (9.5 ms of ~380); the profile's idle mostly in the
# forward and backward (launches), little at the step boundary now.
set -u; T0=$(date +%s); source .gpu/setup.sh
W=/tmp/wc2; mkdir -p $W; finish() { tar czf $OUT/wc2.tgz -C /tmp wc2; echo "tarred at $(el)s"; }
trap finish EXIT
cd .gpu/src
q() { grep -v Warn | grep '^{' | cut -c1-300; echo "  at $(el)s"; }
G="python3 benchmarks/gpu_peers.py --out $W/peers --steps 15 --warmup 6"
$G --micro-batch-size 8 --pairs "fsdp=" --extra "--experiments direct-cast,clip-in-adamw" --tag clip-in-adamw 2>&1 | q
$G --micro-batch-size 8 --pairs "fsdp=" 2>&1 | q
G3="python3 benchmarks/gpu_peers.py --out $W/peers --steps 10 --warmup 4 --model llama-3.2-3b"
[ $(el) -lt 300 ] && $G3 --micro-batch-size 4 --pairs "fsdp=" --extra "--experiments direct-cast,clip-in-adamw" --tag clip-in-adamw 2>&1 | q
[ $(el) -lt 400 ] && $G3 --micro-batch-size 4 --pairs "fsdp=" 2>&1 | q
R="python3 -m shardlab.recipes.cli run --precision bf16-mixed --seq-len 2048 --no-export --metrics none --strategy fsdp --max-steps 10"
[ $(el) -lt 500 ] && { SHARDLAB_PROFILE=$W/prof-1b-fsdp.txt timeout 80 $R --model llama-1b --micro-batch-size 8 --output $W/r1 > $W/r1.log 2>&1; echo "profile rc $? at $(el)s"; grep "device idle" $W/prof-1b-fsdp.txt; }
echo total $(el)s
