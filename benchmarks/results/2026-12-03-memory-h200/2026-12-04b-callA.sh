# Session 2026-12-04b call A: issue 20 on GPU (labels through Liger's fused loss; chat + validation compare),
# issue 18 snapshots of two ZeRO-3 offload points, issue 21/18 re-measure of ddp/fsdp points after release_gradients.
set -u; T0=$(date +%s); source .gpu/setup.sh
REPO=$PWD
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; free -g | head -2
cd .gpu/src
(python3 -c "from deepspeed.ops.op_builder import CPUAdamBuilder; CPUAdamBuilder().load(); print('cpu adam built')" > /tmp/logs/cpuadam.log 2>&1 &)
( python3 -c "from shardlab.recipes.model import initial_folder; print(initial_folder('llama-1b', 42))" > /tmp/logs/build1b.log 2>&1; touch /tmp/1b.ready ) &
( python3 -c "from shardlab.recipes.model import initial_folder; print(initial_folder('llama-3.2-3b', 42))" > /tmp/logs/build3b.log 2>&1; touch /tmp/3b.ready ) &
# issue 20 while the weights are written
cd $REPO
python3 -m pytest -q -p no:cacheprovider tests/recipes/test_speed_options.py -k labels_are_the_targets 2>&1 | tail -3 | tee $OUT/pytest-labels.txt
python3 -m shardlab.recipes.cli compare --strategies ddp,fsdp,zero3 --model tiny-llama3 --data $REPO/examples/chat/arithmetic.jsonl \
  --seq-len 256 --micro-batch-size 2 --max-steps 20 --val-split 0.05 --val-every 5 --output /tmp/chatgpu > /tmp/logs/chatgpu.log 2>&1
echo "chat compare rc $? at $(el)s"; grep -v Warn /tmp/logs/chatgpu.log | grep "compare:" | tail -12
mkdir -p $OUT/chatgpu; cp /tmp/chatgpu/report.md /tmp/chatgpu/metrics.json $OUT/chatgpu/ 2>/dev/null
for s in ddp fsdp zero3; do cp /tmp/chatgpu/runs/$s/summary.json $OUT/chatgpu/summary-$s.json 2>/dev/null; done
cd .gpu/src
BUDGET=$(( ${END:-540} - $(el) ))
echo "scheduler at $(el)s, budget $BUDGET"
python3 benchmarks/gpu_memory.py --out /tmp/m$PART --lanes 4 --offload-lanes 1 --capacity-gib 132 --host-fraction 0.85 --budget-s $BUDGET \
  --jobs "$(cat ../jobs-grads.txt)" --skip-from /tmp/m*/memory.json --ready llama-1b:/tmp/1b.ready,llama-3.2-3b:/tmp/3b.ready ${SNAP:+--snapshot $SNAP} \
  > /tmp/logs/scheduler$PART.log 2>&1
echo "scheduler done at $(el)s"; grep -v Warn /tmp/logs/scheduler$PART.log | tail -45
cp /tmp/m$PART/memory.json $OUT/memory$PART.json; cp /tmp/m$PART/snapshot-*.json $OUT/ 2>/dev/null
cp /tmp/m$PART/*.log /tmp/logs/ 2>/dev/null; tar czf $OUT/logs$PART.tgz -C /tmp logs
echo total $(el)s
