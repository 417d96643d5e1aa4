# Written 2026-12-07 (twenty-third session) before its run: `LIMIT=570 bash benchmarks/results/2026-12-07c-peak-sites/callJ.sh`,
# carrying .carry and .gpu (after `bash benchmarks/gpu_pack.sh --src`), timeout 590. Any one GPU.
# Why: call H (this folder's README) found fsdp's tensors at llama-1b's peak 127,928 bytes UNDER the Trainer's FSDP2 +
# Liger (the allocator's history counts the bytes asked for), while max_memory_allocated put fsdp 822,272 bytes over
# (call F). The caching allocator counts each block whole: rounded to 512 bytes, and a cached block handed out with a
# tail under 1 MiB unsplit. With expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; torchtitan's
# default) a block is split whenever 512 bytes or more are left, so the allocated peak is the asked-for one to rounding.
# Runs: llama-1b mb 8, fsdp and the Trainer at torch's allocator; fsdp and zero3 with expandable segments; fsdp and the
# Trainer both with them; the 3B shape mb 4: fsdp with them, fsdp and the Trainer without, zero3 with them.
# Every row now has peak_requested_bytes (torch.cuda.memory_stats' requested_bytes.all.peak) beside the allocated peak.
# Predictions (before the run): without expandable segments, fsdp's allocated peak 0.5-1.0 MB over the Trainer's
# (as call F), its requested peak under it. With them, fsdp's allocated peak within 0.1 MB of its requested peak, so
# 0.3-1.2 MB under the Trainer's default peak on llama-1b and further under on the 3B shape; fsdp and zero3 tokens/s
# within 1% of without (steady state takes blocks from the cache either way); the Trainer with them also within 0.2 MB
# of its requested peak (so level with ours: the tensors are level).
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs wj
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
cd .gpu/src
python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-1b', 42), f('llama-3.2-3b', 42))" 2>&1 | tail -1
echo "folders at $(el)s"
E=PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
G1="python3 benchmarks/gpu_peers.py --out $W/peers --micro-batch-size 8 --steps 20 --warmup 5"
G3="python3 benchmarks/gpu_peers.py --out $W/peers --model llama-3.2-3b --micro-batch-size 4 --steps 20 --warmup 6"
fits 110 && $G1 --pairs "fsdp=fsdp2_liger" 2>&1 | q
fits 45 && env $E $G1 --pairs "fsdp=" --tag expandable 2>&1 | q
fits 50 && env $E $G1 --pairs "zero3=" --tag expandable 2>&1 | q
fits 75 && env $E $G3 --pairs "fsdp=" --tag expandable 2>&1 | q
fits 180 && $G3 --pairs "fsdp=fsdp2_liger" 2>&1 | q
fits 110 && env $E $G1 --pairs "fsdp=fsdp2_liger" --tag expandable 2>&1 | q
fits 80 && env $E $G3 --pairs "zero3=" --tag expandable 2>&1 | q
python3 - $W/peers/gpu_peers.json <<'P'
import json, sys
for r in json.load(open(sys.argv[1]))["rows"]:
    print(r["shape"], r["system"], r["strategy"], r["tag"], r.get("tokens_per_s"), r.get("peak_memory_bytes"),
          r.get("peak_requested_bytes"), (r.get("command") or "")[:40], r.get("losses"))
P
echo total $(el)s
