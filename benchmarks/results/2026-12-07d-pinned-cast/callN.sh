# Call N as it ran (2026-12-07, twenty-fourth session), given inline to the device tool on call M's warm machine, no
# predictions of its own (callM.sh's apply); saved here after the run: `bash benchmarks/results/2026-12-07d-pinned-cast/callN.sh`,
# carrying .carry and .gpu, timeout 360.
set -u; T0=$(date +%s); LIMIT=330; source .gpu/setup.sh; outputs wn; cd .gpu/src; MB=32; GA=2; D="--experiments gpu-grads,overlap-comm"
B="python3 benchmarks/gpu_peers.py --out $W/peers --offload-steps 3 --offload-warmup 1 --steps 6 --warmup 2 --micro-batch-size $MB --grad-accum $GA"
B8="python3 benchmarks/gpu_peers.py --out $W/peers --offload-steps 6 --offload-warmup 2 --steps 6 --warmup 2 --micro-batch-size 8 --grad-accum 1"
fits 60 && $B8 --pairs "zero3_offload=" --extra "$D" --tag nocast 2>&1 | q
fits 70 && $B --pairs "zero3_offload=" --extra "--offload-ratio 0.1" --tag ratio0.1 2>&1 | q
fits 70 && $B --pairs "zero3_offload=" --extra "$D,gpu-cast,lean-config --offload-ratio 0.1" --tag cast-lean-ratio0.1 2>&1 | q
fits 60 && $B8 --pairs "zero3_offload=" --tag default-again 2>&1 | q
echo total $(el)s
