# Issue 18 on one H200: peak memory of every preset x kernels x checkpointing x 2 micro-batches vs the estimate.
# PART=1: llama-1b (and builds the 3B/7B weights in the background); PART=2: the 3B and 7B shapes.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>&1 | tail -2
mkdir -p /tmp/sl; ln -sfn $PWD/.gpu/src /tmp/sl/shardlab
export PYTHONUNBUFFERED=1 SHARDLAB_CACHE=/tmp/cache PYTHONPATH=/tmp/site:/tmp/sl:$PWD/.gpu/src
cd .gpu/src
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; free -g | head -2
B() { python3 -c "from shardlab.recipes.model import initial_folder; print(initial_folder('$1', 42))" 2>&1 | tail -1; }
mkdir -p /tmp/logs
if [ "$PART" = 1 ]; then
  echo "build 1b at $(el)s: $(B llama-1b)"
  (python3 -c "from deepspeed.ops.op_builder import CPUAdamBuilder; CPUAdamBuilder().load(); print('cpu adam built')" > /tmp/logs/cpuadam.log 2>&1 &)
  ( /usr/bin/time -v python3 -c "from shardlab.recipes.model import initial_folder; print(initial_folder('llama-3.2-3b', 42))"; \
    /usr/bin/time -v python3 -c "from shardlab.recipes.model import initial_folder; print(initial_folder('llama-2-7b', 42))" ) > /tmp/logs/build.log 2>&1 &
  JOBS=$(python3 -c "from benchmarks.gpu_memory import grid; print(','.join(':'.join([m,p,k,'ac' if a else 'noac',str(mb)]) for m,p,k,a,mb in grid() if m=='llama-1b'))")
  SNAP=llama-1b:fsdp:liger:noac:8,llama-1b:fsdp:torch:noac:8,llama-1b:zero3:liger:noac:8
  BUDGET=${BUDGET:-430}
else
  echo "3b: $(B llama-3.2-3b) at $(el)s"
  (/usr/bin/time -v python3 -c "from shardlab.recipes.model import initial_folder; print(initial_folder('llama-2-7b', 42))" > /tmp/logs/build7b.log 2>&1; touch /tmp/7b.ready) &
  (python3 -c "from deepspeed.ops.op_builder import CPUAdamBuilder; CPUAdamBuilder().load(); print('cpu adam built')" > /tmp/logs/cpuadam2.log 2>&1 &)
  JOBS=$(python3 -c "from benchmarks.gpu_memory import grid; print(','.join(':'.join([m,p,k,'ac' if a else 'noac',str(mb)]) for m,p,k,a,mb in sorted(grid(), key=lambda j: (j[2] != 'liger', j[0] == 'llama-2-7b')) if m!='llama-1b'))")
  SNAP=llama-3.2-3b:fsdp:liger:noac:4,llama-3.2-3b:fsdp:torch:noac:4
  BUDGET=${BUDGET:-$(( 520 - $(el) ))}
fi
echo "scheduler at $(el)s, budget $BUDGET"
python3 benchmarks/gpu_memory.py --out /tmp/m --lanes ${LANES:-5} --budget-s $BUDGET --jobs "$JOBS" --snapshot "$SNAP" --ready llama-2-7b:/tmp/7b.ready ${SKIP:+--skip "$SKIP"} > /tmp/logs/scheduler.log 2>&1
echo "scheduler done at $(el)s"; tail -3 /tmp/logs/scheduler.log
cp /tmp/m/memory.json $OUT/memory$PART.json; cp /tmp/m/memory.md $OUT/memory$PART.md
i=0; for f in /tmp/m/snapshot-*.json; do [ -f "$f" ] && cp "$f" $OUT/ ; done
cp /tmp/m/*.log /tmp/logs/ 2>/dev/null; tar czf $OUT/logs$PART.tgz -C /tmp logs
grep -c measured_bytes $OUT/memory$PART.json; cat $OUT/memory$PART.md | head -80; echo total $(el)s
