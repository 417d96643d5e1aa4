# Issue 21: shardlab's presets against the HF Trainer's equivalents (benchmarks/gpu_peers.py), alternating, one GPU, nothing beside.
set -u; T0=$(date +%s); source .gpu/setup.sh
cd .gpu/src
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "from deepspeed.ops.op_builder import CPUAdamBuilder; CPUAdamBuilder().load(); print('cpu adam ready')" 2>&1 | tail -1
python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-1b', 42)); print(f('llama-3.2-3b', 42))" 2>&1 | tail -2
echo "ready at $(el)s"
P1=${P1:-"fsdp=fsdp2_liger;zero3=zero3_liger;zero3_offload=zero3_offload"}
P3=${P3:-"fsdp=fsdp2_liger;zero3="}
python3 benchmarks/gpu_peers.py --out /tmp/peers --model llama-1b --micro-batch-size 8 --pairs "$P1" --steps 15 --warmup 5 \
  --offload-steps 6 --offload-warmup 2 2>&1 | grep -v Warn | grep '^{' ; echo "1b done at $(el)s"
python3 benchmarks/gpu_peers.py --out /tmp/peers --model llama-3.2-3b --micro-batch-size 4 --pairs "$P3" --steps 15 --warmup 5 \
  2>&1 | grep -v Warn | tail -20; echo "3b done at $(el)s"
cp /tmp/peers/gpu_peers.json /tmp/peers/gpu_peers.md $OUT/; mkdir -p /tmp/plogs; cp /tmp/peers/*.log /tmp/plogs/ 2>/dev/null
tar czf $OUT/logs21.tgz -C /tmp plogs; echo total $(el)s
