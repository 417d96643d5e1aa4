# Issue 21, session 2026-12-05 (second), call 1: (a) profiles of fsdp and the Trainer's FSDP2 + Liger (llama-1b, mb 8)
# to find where the step's time goes (goal 1); (b) goal 3: zero3_offload vs the Trainer's offload at mb 8, and
# --offload-ratio 0.5 / 0.25 (first GPU measurement of the ratio: speed, peak, losses); a profile of zero3_offload;
# (c) if time is left, why float8 + compile was 0.5x (recompiles / graph breaks logged, profiled).
# Predictions (before the run): ratio 1 1.05-1.15x the Trainer's offload (as before); 0.5 -> 1.6-1.9x; 0.25 -> 2.2-2.8x,
# peak +7 / +10 GiB; losses equal to ratio 1 to the 3rd decimal. fsdp's profile: matmul ~60%, attention ~20%,
# Liger/Triton ~10%, optimizer ~3%, GPU busy ~97% of wall.
set -u; T0=$(date +%s); source .gpu/setup.sh
W=/tmp/w; mkdir -p $W; finish() { cp -r /tmp/logs $W/ 2>/dev/null; tar czf $OUT/w.tgz -C /tmp w; echo "tarred at $(el)s"; }
trap finish EXIT
cd .gpu/src
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc; free -g | head -2
python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-1b', 42))" 2>&1 | tail -1
echo "ready at $(el)s"
R="python3 -m shardlab.recipes.cli run --model llama-1b --precision bf16-mixed --seq-len 2048 --no-export --metrics none"
q() { grep -v Warn | grep '^{' | cut -c1-400; echo "  at $(el)s"; }
SHARDLAB_PROFILE=$W/prof-fsdp.txt $R --strategy fsdp --micro-batch-size 8 --max-steps 10 --output $W/run-fsdp > $W/run-fsdp.log 2>&1; echo "fsdp profile rc $? at $(el)s"
torchrun --nproc_per_node 1 --master_port 29611 benchmarks/hf_peer.py --model llama-1b --mode fsdp2 --liger --micro-batch-size 8 --steps 5 --warmup 5 --profile $W/prof-hf-fsdp2-liger.txt --out $W/hf-prof.json > $W/hf-prof.log 2>&1; echo "hf profile rc $? at $(el)s"
G="python3 benchmarks/gpu_peers.py --out $W/peers --steps 15 --warmup 5 --offload-steps 6 --offload-warmup 2"
$G --micro-batch-size 8 --pairs "zero3_offload=zero3_offload" 2>&1 | q
$G --micro-batch-size 8 --pairs "zero3_offload=" --extra "--offload-ratio 0.5" --tag ratio0.5 2>&1 | q
$G --micro-batch-size 8 --pairs "zero3_offload=" --extra "--offload-ratio 0.25" --tag ratio0.25 2>&1 | q
[ $(el) -lt 430 ] && { SHARDLAB_PROFILE=$W/prof-offload.txt timeout 90 $R --strategy zero3_offload --micro-batch-size 8 --max-steps 9 --output $W/run-off > $W/run-off.log 2>&1; echo "offload profile rc $? at $(el)s"; }
[ $(el) -lt 470 ] && { TORCH_LOGS="recompiles,graph_breaks" SHARDLAB_PROFILE=$W/prof-f8c.txt timeout $((560 - $(el))) $R --strategy fsdp --micro-batch-size 8 --max-steps 10 --float8 --compile --kernels torch --output $W/run-f8c > $W/run-f8c.log 2>&1; echo "f8c rc $? at $(el)s"; }
echo total $(el)s
