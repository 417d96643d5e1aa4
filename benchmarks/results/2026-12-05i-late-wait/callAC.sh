# Session 2026-12-05 (ninth), the one call device time allows (machine starts kept failing; 2026-12-05h-ab/next.sh's
# three calls cut to one): late-wait's CUDA check, then zero3's levers each against itself within one run
# (SHARDLAB_AB, 64 counted steps after 5 warm-up, blocks of 4) on llama-1b: late-wait and param-lists, then goal 2's
# pair on llama-1b with those measured faster (kept: speedup >= 1.0 and the 95% interval above 1.0), then, while time
# lasts (LIMIT seconds in all), no-nvtx's A/B, goal 2's pair on the 3B shape with the same levers, late-wait's A/B there.
# No memory points: no default changes.
# Predictions (2026-12-05h-ab/next.sh, before any run; late-wait this session): llama-1b param-lists 1.01-1.02x,
# no-nvtx 1.005-1.015x, late-wait 1.01-1.03x; 3B shape late-wait 1.005-1.02x; goal 2 with the kept levers 0.98-1.0x on
# llama-1b, 0.96-0.99x on the 3B shape.
set -u; T0=$(date +%s); source .gpu/setup.sh; LIMIT=${LIMIT:-480}
W=/tmp/wac; mkdir -p $W; finish() { tar czf $OUT/wac.tgz -C /tmp wac; echo "tarred at $(el)s"; }
trap finish EXIT
fits() { [ $(( $(el) + $1 )) -le $LIMIT ]; }
cd .gpu/src
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-1b', 42))" 2>&1 | tail -1
python3 -m tests.strategies.late_wait_steps 29731 2>$W/late_wait_steps.err | tail -1 > $W/late_wait_steps.json
python3 -c "
import json; d = json.load(open('$W/late_wait_steps.json'))
print('late-wait CUDA check:', d['device'], 'same values' if json.dumps(d['stock']) == json.dumps(d['late_wait']) else 'DIFFERENT',
      [(s['skipped'], s['overflow']) for s in d['late_wait']], 'steps', d['late_wait_steps'], 'device waits', d['epilogue_device_waits'])" 2>&1 | tail -1
echo "check at $(el)s"
q() { grep -v Warn | grep '^{' | cut -c1-400; echo "  at $(el)s"; }
G="python3 benchmarks/gpu_peers.py --out $W/peers --micro-batch-size 8"
G3="python3 benchmarks/gpu_peers.py --out $W/peers --model llama-3.2-3b --micro-batch-size 4"
Z="--experiments lean-config,fused-step"
for lever in late-wait param-lists; do
  fits 60 && SHARDLAB_AB=$lever $G --steps 64 --warmup 5 --pairs "zero3=" --extra "$Z,$lever" --tag ab-$lever 2>&1 | q
done
KEEP=$(python3 -c "
import json
rows = json.load(open('$W/peers/gpu_peers.json'))['rows']
print(','.join(r['lever_ab']['lever'] for r in rows if r.get('lever_ab') and r['lever_ab']['speedup'] >= 1.0
               and r['lever_ab']['speedup_95'][0] > 1.0))")
echo "kept on llama-1b: ${KEEP:-none}" | tee $W/kept.txt
LEV=lean-config,fused-step${KEEP:+,$KEEP}
fits 90 && { $G --steps 15 --warmup 6 --pairs "zero3=" --extra "--experiments $LEV" --tag kept 2>&1 | q; $G --steps 15 --warmup 6 --pairs "fsdp=" 2>&1 | q; }
fits 60 && SHARDLAB_AB=no-nvtx $G --steps 64 --warmup 5 --pairs "zero3=" --extra "$Z,no-nvtx" --tag ab-no-nvtx 2>&1 | q
fits 150 && { python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-3.2-3b', 42))" 2>&1 | tail -1; $G3 --steps 10 --warmup 4 --pairs "zero3=" --extra "--experiments $LEV" --tag kept 2>&1 | q; $G3 --steps 10 --warmup 4 --pairs "fsdp=" 2>&1 | q; }
fits 75 && SHARDLAB_AB=late-wait $G3 --steps 48 --warmup 5 --pairs "zero3=" --extra "$Z,late-wait" --tag ab-late-wait 2>&1 | q
echo total $(el)s
