# Session 2026-12-05 (seventh), call G: where zero3's one-rank step syncs and spends host time (llama-1b mb 8).
set -u; T0=$(date +%s); source .gpu/setup.sh
W=/tmp/wg; mkdir -p $W/sync; finish() { tar czf $OUT/wg.tgz -C /tmp wg; echo "tarred at $(el)s"; }
trap finish EXIT
GS=$PWD/.gpu/sync
cd .gpu/src
python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-1b', 42))" 2>&1 | tail -1
R="python3 -m shardlab.recipes.cli run --model llama-1b --precision bf16-mixed --seq-len 2048 --no-export --metrics none --micro-batch-size 8"
SYNC_OUT=$W/sync PYTHONPATH=$GS:$PYTHONPATH timeout 100 $R --strategy zero3 --max-steps 6 --output $W/rs > $W/rs.log 2>&1; echo "sync rc $? at $(el)s"
timeout 120 python3 -m cProfile -o $W/zero3.pstats -m shardlab.recipes.cli run --model llama-1b --precision bf16-mixed --seq-len 2048 --no-export --metrics none --micro-batch-size 8 --strategy zero3 --max-steps 16 --output $W/rp > $W/rp.log 2>&1; echo "cprofile rc $? at $(el)s"
python3 - <<'PY' > $W/pstats.txt 2>&1
import pstats
s = pstats.Stats("/tmp/wg/zero3.pstats"); s.sort_stats("tottime").print_stats(60); s.sort_stats("cumulative").print_stats(120)
PY
tail -3 $W/rs.log $W/rp.log
echo total $(el)s
