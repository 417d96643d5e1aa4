# Issue 21, session 2026-12-05 (sixth), call D: fsdp's defaults now direct-cast + clip-in-adamw: (a) their memory points
# (llama-1b mb 8, checkpointing on and off; the same peak as direct-cast alone is expected: the clip changes no
# buffer); (b) a second sample of each A/B of calls B and C, alternating: the new default, direct-cast alone (this
# tree's recorder), HEAD's tree (reads each step at its end, pageable batches), twice.
# Predictions (before the run): peaks 33.047 / 17.499 GiB as before; clip-in-adamw +0.5-1%, the recorder +0.5-1%.
set -u; T0=$(date +%s); source .gpu/setup.sh
W=/tmp/wd; mkdir -p $W; finish() { tar czf $OUT/wd.tgz -C /tmp wd; echo "tarred at $(el)s"; }
trap finish EXIT
mkdir -p /tmp/slbase; ln -sfn $PWD/.gpu/base /tmp/slbase/shardlab
BASE="PYTHONPATH=/tmp/site:/tmp/slbase:$PWD/.gpu/base"
cd .gpu/src
python3 benchmarks/gpu_memory.py --out $W/memory --lanes 2 --budget-s 90 --jobs "llama-1b:fsdp:liger:ac:8:exp.direct-cast.clip-in-adamw,llama-1b:fsdp:liger:noac:8:exp.direct-cast.clip-in-adamw" 2>&1 | grep '^{' | cut -c1-300; echo "memory at $(el)s"
q() { grep -v Warn | grep '^{' | cut -c1-300; echo "  at $(el)s"; }
G="python3 benchmarks/gpu_peers.py --micro-batch-size 8 --steps 15 --warmup 6"
for i in 1 2; do
  [ $(el) -lt 250 ] && $G --out $W/peers$i --pairs "fsdp=" 2>&1 | q
  [ $(el) -lt 255 ] && $G --out $W/peers$i --pairs "fsdp=" --extra "--experiments direct-cast" --tag direct-cast-only 2>&1 | q
  [ $(el) -lt 260 ] && env $BASE $G --out $W/peers$i --pairs "fsdp=" --tag head 2>&1 | q
done
echo total $(el)s
