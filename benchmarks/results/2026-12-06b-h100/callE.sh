# Written 2026-12-06 (eleventh session) after call D, not yet run (the session's device time was spent). For the next
# session, after `bash benchmarks/gpu_pack.sh --src`: `LIMIT=540 bash benchmarks/results/2026-12-06b-h100/callE.sh`,
# carrying .carry and .gpu, timeout 580. Any one GPU; on an H100 the 3B shape runs at 68 of 79 GiB for zero3.
# Why: on the 3B shape zero3 (lean-config,fused-step,late-wait) ran 0.951x / 0.939x fsdp on two H100s, its steps
# varying 368-452 ms where fsdp's stay within 371-387 ms; expandable segments took away the allocator flushes, not the
# slow steps (2026-12-06b-h100.md). On llama-1b zero3 runs the same kernels as fsdp and loses in device idle time
# (2026-12-05g-h100.md); nobody has profiled the 3B shape.
# On an H100, in order while time lasts: (1) the 3B profiles, zero3 then fsdp (3 steps each after warm-up); (2) goal 2's
# 3B pair again, fsdp first. On an H200 (the goals' device; there 3B zero3 has room: 68 of 139 GiB): (1) goal 2's pairs
# on both shapes, fsdp first; (2) goal 1's pairs (fsdp against the Trainer's FSDP2 + Liger); (3) the 3B profiles.
# Predictions (before the run): zero3's 3B kernels within 2% of fsdp's ms a step; on the H100 its device idle 25-45 ms a
# step to fsdp's ~15, the pair 0.94-0.97x. On an H200, goal 2 0.97-0.99x on llama-1b and 0.96-0.99x on the 3B shape
# (0.989x / 0.970-1.000x there on 2026-12-05, since when fsdp gained ~3% and zero3 late-wait's ~1.7%); goal 1
# 1.05-1.07x (no fsdp default moved since).
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs we
cd .gpu/src
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
M="'llama-3.2-3b'"; case "$DEV" in *H200*) M="$M, 'llama-1b'";; esac
python3 -c "from shardlab.recipes.model import initial_folder as f; [print(f(m, 42)) for m in ($M,)]" 2>&1 | tail -2
echo "folder at $(el)s"
R="python3 -m shardlab.recipes.cli run --model llama-3.2-3b --precision bf16-mixed --seq-len 2048 --no-export --metrics none --micro-batch-size 4 --max-steps 10"
profiles() {
  fits 80 && { SHARDLAB_PROFILE=$W/profile-zero3-3b.txt timeout 80 $R --strategy zero3 --output $W/rz > $W/rz.log 2>&1; echo "zero3 profile rc $? at $(el)s"; }
  fits 60 && { SHARDLAB_PROFILE=$W/profile-fsdp-3b.txt timeout 60 $R --strategy fsdp --output $W/rf > $W/rf.log 2>&1; echo "fsdp profile rc $? at $(el)s"; }
  head -12 $W/profile-*-3b.txt; }
G="python3 benchmarks/gpu_peers.py --out $W/peers --micro-batch-size 8 --steps 20 --warmup 5"
G3="python3 benchmarks/gpu_peers.py --out $W/peers --model llama-3.2-3b --micro-batch-size 4 --steps 20 --warmup 6"
case "$DEV" in
  *H200*)
    fits 50 && $G3 --pairs "fsdp=" 2>&1 | q
    fits 70 && $G3 --pairs "zero3=" 2>&1 | q
    fits 40 && $G --pairs "fsdp=" 2>&1 | q
    fits 45 && $G --pairs "zero3=" 2>&1 | q
    fits 100 && $G --pairs "fsdp=fsdp2_liger" 2>&1 | q
    fits 130 && $G3 --pairs "fsdp=fsdp2_liger" 2>&1 | q
    profiles ;;
  *)
    profiles
    fits 50 && $G3 --pairs "fsdp=" 2>&1 | q
    fits 70 && $G3 --pairs "zero3=" 2>&1 | q ;;
esac
echo total $(el)s
