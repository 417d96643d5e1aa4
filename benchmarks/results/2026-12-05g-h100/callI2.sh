# Session 2026-12-05 (seventh), call I2 (the same pair, reversed): zero3 on one rank with every parameter persistent (stage3_param_persistence_
# threshold 1e12 through --deepspeed-config: on one rank the partition is the whole parameter, so no memory changes) against
# zero3's defaults, llama-1b mb 8. Prediction: DeepSpeed's backward hooks (~49 ms of host time a step) do less; +2-5%.
set -u; T0=$(date +%s); source .gpu/setup.sh
W=/tmp/wi2; mkdir -p $W; finish() { tar czf $OUT/wi2.tgz -C /tmp wi2; echo "tarred at $(el)s"; }
trap finish EXIT
P=$PWD/.gpu/persist.json
cd .gpu/src
python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-1b', 42))" 2>&1 | tail -1
q() { grep -v Warn | grep '^{' | cut -c1-300; echo "  at $(el)s"; }
G="python3 benchmarks/gpu_peers.py --out $W/peers --steps 12 --warmup 5 --micro-batch-size 8"
$G --pairs "zero3=" --extra "--deepspeed-config $P" --tag persist 2>&1 | q
$G --pairs "zero3=" 2>&1 | q
echo total $(el)s
