# Written 2026-12-06 (fifteenth session) before its run: 2026-12-06e-idle/next.sh as written there (predictions below
# are that file's, made before any of this ran), with one row added at the end: fsdp at the same batch, nothing
# offloaded (the bound; call M measured it at 1.865x a slower Trainer). `LIMIT=540 bash
# benchmarks/results/2026-12-06f-offload/callR.sh`, carrying .carry and .gpu (after `bash benchmarks/gpu_pack.sh
# --src`), timeout 580. On an H200 it runs 2026-12-06b-h100/callE.sh's H200 branch instead (goals 1 and 2).
# Predictions (before the run): lean-config / stock 1.00-1.05x at R = 1 and 1.00-1.04x at R = 0.1; the Trainer's
# offload + Liger within 5% of call O's 46,436; the profile: the GPU idle 10-20% of the step, most of it while the host
# waits on DeepSpeed's CPU Adam or the gradients' copies to the host at each micro-batch; fsdp (the bound) 1.45-1.65x
# the Trainer's offload of this call.
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs wr
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
case "$DEV" in *H200*) exec env LIMIT=$LIMIT bash benchmarks/results/2026-12-06b-h100/callE.sh ;; esac
cd .gpu/src
python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-1b', 42))" 2>&1 | tail -1
offload_batch llama-1b
B="python3 benchmarks/gpu_peers.py --out $W/peers --offload-steps 3 --offload-warmup 1 --steps 6 --warmup 2 --micro-batch-size $MB --grad-accum $GA"
L="--experiments lean-config"
fits 110 && $B --pairs "zero3_offload=zero3_offload_liger" 2>&1 | q
fits 60 && $B --pairs "zero3_offload=" --extra "$L" --tag lean-config 2>&1 | q
fits 50 && $B --pairs "zero3_offload=" --extra "--offload-ratio 0.1" --tag ratio0.1 2>&1 | q
fits 50 && $B --pairs "zero3_offload=" --extra "$L --offload-ratio 0.1" --tag lean-config-ratio0.1 2>&1 | q
R="python3 -m shardlab.recipes.cli run --model llama-1b --strategy zero3_offload --precision bf16-mixed --seq-len 2048 --no-export --metrics none --micro-batch-size $MB --grad-accum $GA --max-steps 10"
fits 100 && { SHARDLAB_PROFILE=$W/profile-offload-r0.1.txt timeout 100 $R $L --offload-ratio 0.1 --output $W/rp > $W/rp.log 2>&1; echo "profile rc $? at $(el)s"; sed -n '1,12p;/device idle/,$p' $W/profile-offload-r0.1.txt; }
fits 70 && $B --pairs "fsdp=" 2>&1 | q
echo total $(el)s
