# sourced at the start of every device call
set -u
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>&1 | tail -2
mkdir -p /tmp/sl/shardlab /tmp/sl0/shardlab
for d in core strategies recipes; do ln -sfn $PWD/$d /tmp/sl/shardlab/$d; ln -sfn $PWD/.gpu/base/$d /tmp/sl0/shardlab/$d; done
export PYTHONUNBUFFERED=1 SHARDLAB_CACHE=/tmp/cache
NEW=/tmp/site:/tmp/sl OLD=/tmp/site:/tmp/sl0
export PYTHONPATH=$NEW
el() { echo $(( $(date +%s) - T0 )); }
# step SECONDS_LEFT_AT_LEAST PYPATH OUTNAME CMD...: run CMD with PYTHONPATH if enough time remains before END
step() { local need=$1 pp=$2 name=$3; shift 3; local left=$(( END - $(el) )); if [ $left -lt $need ]; then echo "SKIP $name (left $left s)"; return; fi
  echo "== $name at $(el)s: $*"; PYTHONPATH=$pp timeout $(( left - 5 )) "$@" > $OUT/$name.log 2>&1; echo "rc=$? $name done at $(el)s"; tail -3 $OUT/$name.log; }
