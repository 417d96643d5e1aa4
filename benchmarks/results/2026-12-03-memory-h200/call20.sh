# Session 2026-12-03 night. Call 1 (PART=a): issue 19's zero3>fsdp resume on llama-1b (alone on a lane, first),
# beside issue 18's missing memory points; later calls (PART=b, c): the points still missing (skips what /tmp/m*/memory.json has).
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>&1 | tail -2
mkdir -p /tmp/sl; ln -sfn $PWD/.gpu/src /tmp/sl/shardlab
export PYTHONUNBUFFERED=1 SHARDLAB_CACHE=/tmp/cache PYTHONPATH=/tmp/site:/tmp/sl:$PWD/.gpu/src
cd .gpu/src
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; free -g | head -2; df -h /tmp | tail -1
mkdir -p /tmp/logs
CAP=132; HF=0.8
if [ ! -f /tmp/i19.started ]; then
  touch /tmp/i19.started
  (python3 -c "from deepspeed.ops.op_builder import CPUAdamBuilder; CPUAdamBuilder().load(); print('cpu adam built')" > /tmp/logs/cpuadam.log 2>&1 &)
  python3 -c "from shardlab.recipes.model import initial_folder; print(initial_folder('llama-1b', 42))" 2>&1 | tail -1
  echo "1b built at $(el)s"
  ( python3 -c "from shardlab.recipes.model import initial_folder; print(initial_folder('llama-3.2-3b', 42))" > /tmp/logs/build3b.log 2>&1; touch /tmp/3b.ready; echo "3b built at $(el)s" >> /tmp/logs/build3b.log ) &
  ( python3 benchmarks/gpu_resume.py --out /tmp/i19 --pairs "zero3>fsdp" --model llama-1b --steps 30 --micro-batch 4 > /tmp/logs/resume.log 2>&1;
    echo "resume done at $(el)s" >> /tmp/logs/resume.log; cp /tmp/i19/resume.json $OUT/resume.json; cp /tmp/i19/*.log /tmp/logs/;
    rm -rf /tmp/i19/zero3/checkpoints /tmp/i19/export-zero3 ) &
  CAP=100; HF=0.6
fi
BUDGET=$(( ${END:-500} - $(el) ))
echo "scheduler at $(el)s, budget $BUDGET, capacity $CAP GiB"
python3 benchmarks/gpu_memory.py --out /tmp/m$PART --lanes 5 --capacity-gib $CAP --host-fraction $HF --budget-s $BUDGET \
  --jobs "$(cat ../jobs20.txt)" --skip-from /tmp/m*/memory.json --ready llama-3.2-3b:/tmp/3b.ready > /tmp/logs/scheduler$PART.log 2>&1
echo "scheduler done at $(el)s"; grep -v Warn /tmp/logs/scheduler$PART.log | tail -40
cp /tmp/m$PART/memory.json $OUT/memory$PART.json
wait
cat /tmp/logs/resume.log 2>/dev/null | tail -3; [ -f $OUT/resume.json ] || cp /tmp/i19/resume.json $OUT/ 2>/dev/null
cp /tmp/m$PART/*.log /tmp/logs/ 2>/dev/null; tar czf $OUT/logs$PART.tgz -C /tmp logs
df -h /tmp | tail -1; echo total $(el)s
