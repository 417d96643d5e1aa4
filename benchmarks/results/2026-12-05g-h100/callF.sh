# Session 2026-12-05 (seventh), call F (2026-12-05f-h100/next.sh as written there, run on an H100): goal 2 on the H200 and where zero3's one-rank step spends its time.
# On the H100 (2026-12-05f, call B) zero3 ran 0.930x fsdp on llama-1b and 0.902x on the 3B shape: fsdp gained ~3%
# (direct-cast, clip-in-adamw) and no profile of zero3's step exists yet. (a) fsdp and zero3 on both shapes, with the
# Trainer's FSDP2 + Liger, in one call (goals 1 and 2 on the H200); (b) SHARDLAB_PROFILE of zero3 and of fsdp on
# llama-1b (recipes/profile.py: kernels by kind, device idle, host ops), to find zero3's one-rank copies and host time.
# Goal 3's call is 2026-12-05e-h100/next.sh (it needs the H200's memory too). Setup as in callB.sh (.gpu/setup.sh,
# .gpu/src a copy of the tree).
# Predictions (before the run): llama-1b fsdp ~1.08-1.10x the Trainer, zero3 ~0.95x fsdp; 3B fsdp ~1.05x, zero3 ~0.93x;
# the profile: zero3 spends more in copies (gathers and reduces through buffers on one rank) and more host time per
# layer (DeepSpeed's module hooks) than fsdp.
set -u; T0=$(date +%s); source .gpu/setup.sh
W=/tmp/wn; mkdir -p $W; finish() { tar czf $OUT/wn.tgz -C /tmp wn; echo "tarred at $(el)s"; }
trap finish EXIT
cd .gpu/src
python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-1b', 42)); print(f('llama-3.2-3b', 42))" 2>&1 | tail -2
q() { grep -v Warn | grep '^{' | cut -c1-300; echo "  at $(el)s"; }
R="python3 -m shardlab.recipes.cli run --model llama-1b --precision bf16-mixed --seq-len 2048 --no-export --metrics none --micro-batch-size 8 --max-steps 10"
SHARDLAB_PROFILE=$W/prof-zero3-1b.txt timeout 90 $R --strategy zero3 --output $W/rz > $W/rz.log 2>&1; echo "zero3 profile rc $? at $(el)s"
SHARDLAB_PROFILE=$W/prof-fsdp-1b.txt timeout 80 $R --strategy fsdp --output $W/rf > $W/rf.log 2>&1; echo "fsdp profile rc $? at $(el)s"
python3 benchmarks/gpu_peers.py --out $W/peers --steps 15 --warmup 6 --micro-batch-size 8 --pairs "fsdp=fsdp2_liger;zero3=" 2>&1 | q
[ $(el) -lt 420 ] && python3 benchmarks/gpu_peers.py --out $W/peers --steps 10 --warmup 4 --model llama-3.2-3b --micro-batch-size 4 --pairs "fsdp=fsdp2_liger;zero3=" 2>&1 | q
echo total $(el)s
