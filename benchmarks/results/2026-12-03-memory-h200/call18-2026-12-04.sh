# Issue 18: the missing memory points (.gpu/jobs21.txt), 3B offload points first; PART names the call.
set -u; T0=$(date +%s); source .gpu/setup.sh
cd .gpu/src
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; free -g | head -2
if [ ! -f /tmp/init.started ]; then
  touch /tmp/init.started
  (python3 -c "from deepspeed.ops.op_builder import CPUAdamBuilder; CPUAdamBuilder().load(); print('cpu adam built')" > /tmp/logs/cpuadam.log 2>&1 &)
  ( python3 -c "from shardlab.recipes.model import initial_folder; print(initial_folder('llama-1b', 42))" > /tmp/logs/build1b.log 2>&1; touch /tmp/1b.ready ) &
  python3 -c "from shardlab.recipes.model import initial_folder; print(initial_folder('llama-3.2-3b', 42))" 2>&1 | tail -1; touch /tmp/3b.ready
  echo "3b built at $(el)s"
fi
BUDGET=$(( ${END:-480} - $(el) ))
echo "scheduler at $(el)s, budget $BUDGET"
python3 benchmarks/gpu_memory.py --out /tmp/m$PART --lanes 4 --offload-lanes 3 --capacity-gib 132 --host-fraction 0.85 --budget-s $BUDGET \
  --jobs "$(cat ../jobs21.txt)" --skip-from /tmp/m*/memory.json --ready llama-1b:/tmp/1b.ready,llama-3.2-3b:/tmp/3b.ready ${SNAP:+--snapshot $SNAP} \
  > /tmp/logs/scheduler$PART.log 2>&1
echo "scheduler done at $(el)s"; grep -v Warn /tmp/logs/scheduler$PART.log | tail -30
cp /tmp/m$PART/memory.json $OUT/memory$PART.json; cp /tmp/m$PART/snapshot-*.json $OUT/ 2>/dev/null
cp /tmp/m$PART/*.log /tmp/logs/ 2>/dev/null; tar czf $OUT/logs18$PART.tgz -C /tmp logs
df -h /tmp | tail -1; echo total $(el)s
