# Issue 21, session 2026-12-05 (sixth), call E (warm, right after D): goal 1 with fsdp's final defaults (direct-cast +
# clip-in-adamw) against the Trainer's FSDP2 + Liger: llama-1b mb 8, then the 3B shape mb 4 as time allows.
set -u; T0=$(date +%s); source .gpu/setup.sh
W=/tmp/we; mkdir -p $W; finish() { tar czf $OUT/we.tgz -C /tmp we; echo "tarred at $(el)s"; }
trap finish EXIT
cd .gpu/src
q() { grep -v Warn | grep '^{' | cut -c1-300; echo "  at $(el)s"; }
python3 benchmarks/gpu_peers.py --out $W/peers --steps 15 --warmup 6 --micro-batch-size 8 --pairs "fsdp=fsdp2_liger" 2>&1 | q
[ $(el) -lt 120 ] && python3 benchmarks/gpu_peers.py --out $W/peers --steps 10 --warmup 4 --model llama-3.2-3b --micro-batch-size 4 --pairs "fsdp=fsdp2_liger" 2>&1 | q
echo total $(el)s
