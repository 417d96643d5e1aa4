# Sourced at the start of every GPU call as .gpu/setup.sh (benchmarks/gpu_pack.sh puts it there; the calls of 2026-12-05 on
# ran it, then kept as results/2026-12-05-zero3-experiments-h200/setup.sh): the wheels into /tmp/site once per machine,
# shardlab importable from .gpu/src, el() the seconds since T0. For a call's script: `outputs NAME` makes W=/tmp/NAME and
# tars it (with /tmp/logs) into $OUT/NAME.tgz when the script exits; `fits S` is true while S more seconds stay within
# LIMIT (default 540); `q` keeps a gpu_peers/gpu_memory run's JSON lines and says when it ended.
T0=${T0:-$(date +%s)}; el() { echo $(( $(date +%s) - T0 )); }
LIMIT=${LIMIT:-540}; fits() { [ $(( $(el) + $1 )) -le $LIMIT ]; }
q() { grep -v Warn | grep '^{' | cut -c1-300; echo "  at $(el)s"; }
# `offload_batch MODEL`: the selector's offload choice on this GPU (recipe plan --strategy auto --offload optimizer, saved
# as $W/plan.json), as CH (the preset), MB (micro-batch) and GA (accumulation); run from .gpu/src after `outputs`.
offload_batch() {
  python3 -m shardlab.recipes.cli plan --strategy auto --offload optimizer --model $1 --json > $W/plan.json 2> $W/plan.err
  read CH MB GA < <(python3 -c "import json; d = json.load(open('$W/plan.json')); print(d['choice'], d['micro_batch_size'], d['grad_accum'])")
  echo "selector: $CH micro-batch $MB x accumulation $GA at $(el)s"; }
# `folders MODEL...`: each model's random initial weights made before the timed runs (from .gpu/src; ~50 s for the 3B shape)
folders() { python3 -c "import sys; from shardlab.recipes.model import initial_folder as f; [print(f(m, 42)) for m in sys.argv[1:]]" \
  "$@" 2>&1 | tail -$#; echo "folders at $(el)s"; }
outputs() { W=/tmp/$1; mkdir -p $W /tmp/logs
  trap "cp -r /tmp/logs $W/ 2>/dev/null; tar czf $OUT/$1.tgz -C /tmp $1; echo \"tarred at \$(el)s\"" EXIT; }
if [ ! -f /tmp/site.ready ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .carry/whl/*.whl 2>&1 | grep -v WARN | tail -2
  PYTHONPATH=/tmp/site python3 -c "import datasets, pyarrow.parquet, dill, xxhash, multiprocess" 2>/dev/null || { echo "image datasets/pyarrow unusable: carried ones"; tar xJf .carry/extra.tar.xz -C /tmp/site; }
  touch /tmp/site.ready
fi
mkdir -p /tmp/sl; ln -sfn $PWD/.gpu/src /tmp/sl/shardlab
export PYTHONUNBUFFERED=1 SHARDLAB_CACHE=/tmp/cache PYTHONPATH=/tmp/site:/tmp/sl:$PWD/.gpu/src
python3 -c "import datasets, deepspeed, liger_kernel, pydantic, torchao, shardlab.recipes.run, torch; print('imports ok', datasets.__version__, torchao.__version__, torch.__version__)" 2>&1 | grep -v Warn | tail -1
mkdir -p /tmp/logs
echo "setup at $(el)s"
