# Issue 21, session 2026-12-05 (fifth), call C (warm H100): the late read fixed (call A's `float(loss)` on the device
# tensor still waited for the whole queue: the loss now goes to pinned memory without a wait, read a step later).
# llama-1b mb 8: fsdp default against the Trainer's FSDP2 + Liger, then fsdp settling every step.
# Prediction: +1-3% over settle-every-step (call A's profile: 37 ms a step of GPU idle, 2 ms of it behind the sync).
set -u; T0=$(date +%s); source .gpu/setup.sh
W=/tmp/wc; mkdir -p $W; finish() { tar czf $OUT/wc.tgz -C /tmp wc; echo "tarred at $(el)s"; }
trap finish EXIT
cd .gpu/src
q() { grep -v Warn | grep '^{' | cut -c1-300; echo "  at $(el)s"; }
G="python3 benchmarks/gpu_peers.py --out $W/peers --steps 15 --warmup 6"
$G --micro-batch-size 8 --pairs "fsdp=fsdp2_liger" 2>&1 | q
SHARDLAB_SETTLE_EVERY_STEP=1 $G --micro-batch-size 8 --pairs "fsdp=" --tag settle-every-step 2>&1 | q
[ $(el) -lt 250 ] && $G --micro-batch-size 8 --pairs "fsdp=" --tag default-2 2>&1 | q
echo total $(el)s
