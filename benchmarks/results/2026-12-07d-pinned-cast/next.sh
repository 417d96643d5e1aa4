# Written 2026-12-07 (twenty-fourth session) for the next session; not run (this session's device time was spent):
# `LIMIT=560 bash benchmarks/results/2026-12-07d-pinned-cast/next.sh`, carrying .carry and .gpu (after
# `bash benchmarks/gpu_pack.sh --src`), timeout 590. An H200 if one comes (the goals name it), else an H100.
# Why: (1) gpu-cast (page-locked) became zero3_offload's default and made its step cheaper; the selector's offload batch
# (131,072 tokens a step, core/selector.py OFFLOAD_TOKENS_PER_STEP) was chosen from zero3_offload's time per token
# against zero3's before it: measure both at 16,384 / 65,536 / 131,072 tokens a step in one call. (2) Goal 3 at the
# selector's batch: where R = 1's step goes now (a profile; callM.sh's did not start). (3) The 3B shape's offload
# against the Trainer's at its selector batch (0.98x before gpu-cast, 2026-12-06h).
# Predictions (before the run): zero3_offload / zero3 time per token 1.6-2.2x at 16,384, 1.1-1.3x at 65,536, 1.0-1.15x
# at 131,072; the profile: no "Memcpy HtoD (Pageable -> Device)", the host's CPU Adam the largest gap (250-350 ms a
# step); the 3B shape 1.1-1.3x the Trainer's offload + Liger.
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs wo
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
cd .gpu/src
folders llama-1b llama-3.2-3b
P="python3 benchmarks/gpu_peers.py --out $W/peers --offload-steps 3 --offload-warmup 1 --steps 6 --warmup 2"
for mbga in "8 1" "8 4" "16 4"; do set -- $mbga
  fits 70 && $P --micro-batch-size $1 --grad-accum $2 --pairs "zero3=" 2>&1 | q
  fits 70 && $P --micro-batch-size $1 --grad-accum $2 --pairs "zero3_offload=" 2>&1 | q; done
offload_batch llama-1b
R="python3 -m shardlab.recipes.cli run --model llama-1b --strategy zero3_offload --precision bf16-mixed --seq-len 2048 --no-export --metrics none --micro-batch-size $MB --grad-accum $GA --max-steps 8"
fits 100 && { SHARDLAB_PROFILE=$W/profile-r1.txt timeout 100 $R --output $W/rp > $W/rp.log 2>&1; echo "profile rc $? at $(el)s"; sed -n '1,12p;/top 25 host/,+14p;/device idle/,$p' $W/profile-r1.txt; }
offload_batch llama-3.2-3b
fits 200 && python3 benchmarks/gpu_peers.py --out $W/peers --model llama-3.2-3b --offload-steps 3 --offload-warmup 1 --steps 6 --warmup 2 \
  --micro-batch-size $MB --grad-accum $GA --pairs "zero3_offload=zero3_offload_liger" 2>&1 | q
echo total $(el)s
