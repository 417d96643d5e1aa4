# Issue 18, this session: the Llama-2-7B shape's points (and fillers while its weights build).
# JOBS7: the 7B points of this call (in order); FILL: points run while the 7B weights build; FILL_S: their budget.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>&1 | tail -2
mkdir -p /tmp/sl; ln -sfn $PWD/.gpu/src /tmp/sl/shardlab
export PYTHONUNBUFFERED=1 SHARDLAB_CACHE=/tmp/cache PYTHONPATH=/tmp/site:/tmp/sl:$PWD/.gpu/src
cd .gpu/src
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; free -g | head -2
mkdir -p /tmp/logs
(python3 -c "from deepspeed.ops.op_builder import CPUAdamBuilder; CPUAdamBuilder().load(); print('cpu adam built')" > /tmp/logs/cpuadam.log 2>&1 &)
( /usr/bin/time -v python3 -c "from shardlab.recipes.model import initial_folder; print(initial_folder('llama-2-7b', 42))" > /tmp/logs/build7b.log 2>&1; touch /tmp/7b.ready; echo "7b built at $(el)s" >> /tmp/logs/build7b.log ) &
if [ -n "${FILL:-}" ]; then
  python3 -c "from shardlab.recipes.model import initial_folder; print(initial_folder('${FILLMODEL:-llama-1b}', 42))" 2>&1 | tail -1
  python3 benchmarks/gpu_memory.py --out /tmp/f$PART --lanes 5 --budget-s ${FILL_S:-90} --jobs "$FILL" > /tmp/logs/fill.log 2>&1
  echo "fillers done at $(el)s"; tail -2 /tmp/logs/fill.log; cp /tmp/f$PART/memory.json $OUT/fill$PART.json
fi
while [ ! -f /tmp/7b.ready ]; do sleep 2; done; tail -3 /tmp/logs/build7b.log
BUDGET=$(( ${END:-500} - $(el) ))
echo "7B scheduler at $(el)s, budget $BUDGET"
python3 benchmarks/gpu_memory.py --out /tmp/m$PART --lanes 2 --budget-s $BUDGET --jobs "$JOBS7" > /tmp/logs/scheduler.log 2>&1
echo "scheduler done at $(el)s"; cat /tmp/logs/scheduler.log | grep -v Warn | tail -20
cp /tmp/m$PART/memory.json $OUT/memory$PART.json
cp /tmp/m$PART/*.log /tmp/f$PART/*.log /tmp/logs/ 2>/dev/null; tar czf $OUT/logs$PART.tgz -C /tmp logs
echo total $(el)s
