# Issue 16 on one H200: the Llama-3.2-3B shape (tied, 128k vocab) through fsdp and zero3 at micro-batch 4, seq 2048,
# and llama-1b fsdp as a check that the meta-device FSDP loader did not change speed.
set -u
T0=$(date +%s); END=${END:-560}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>&1 | tail -2
mkdir -p /tmp/sl/shardlab; for d in core strategies recipes; do ln -sfn $PWD/$d /tmp/sl/shardlab/$d; done
export PYTHONUNBUFFERED=1 SHARDLAB_CACHE=/tmp/cache PYTHONPATH=/tmp/site:/tmp/sl:$PWD
el() { echo $(( $(date +%s) - T0 )); }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $OUT/nvidia-smi.txt
python3 -c "import torch,transformers,lightning,deepspeed,liger_kernel; print(torch.__version__, transformers.__version__, lightning.__version__, deepspeed.__version__)" 2>&1 | tail -1 | tee $OUT/versions.txt
echo "build 3B weights at $(el)s"; /usr/bin/time -v python3 -c "from shardlab.recipes.model import initial_folder; print(initial_folder('llama-3.2-3b', 0))" > $OUT/build.log 2>&1; grep -E "Elapsed|Maximum resident" $OUT/build.log; echo "built at $(el)s"
G="python3 benchmarks/gpu_strategies.py --no-raw --out /tmp/w"
for s in fsdp zero3; do left=$(( END - $(el) )); [ $left -lt 120 ] && { echo SKIP $s; continue; }
  echo "== 3b $s at $(el)s"; timeout $((left-5)) $G --model llama-3.2-3b --micro-batch-size 4 --strategies $s --tag 3b-mb4 > $OUT/3b-$s.log 2>&1; echo "rc=$? at $(el)s"; tail -2 $OUT/3b-$s.log; done
left=$(( END - $(el) )); [ $left -ge 110 ] && { echo "== 1b fsdp at $(el)s"; timeout $((left-5)) $G --strategies fsdp --tag 1b-mb8 > $OUT/1b-fsdp.log 2>&1; echo "rc=$? at $(el)s"; tail -2 $OUT/1b-fsdp.log; }
cp /tmp/w/gpu_strategies.json /tmp/w/gpu_strategies.md $OUT/ 2>/dev/null; mkdir -p $OUT/logs; cp /tmp/w/*.log $OUT/logs/ 2>/dev/null; cat $OUT/gpu_strategies.md; echo total $(el)s
