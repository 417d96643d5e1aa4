# Written 2026-12-07 (twenty-third session) before its run: `LIMIT=560 bash benchmarks/results/2026-12-07c-peak-sites/callK.sh`,
# carrying .carry and .gpu (after `bash benchmarks/gpu_pack.sh --src`), timeout 590. Any one GPU.
# Why: expandable segments became the GPU default (RunConfig.expandable_segments, set in each rank by
# torch.cuda.memory._set_allocator_settings, not by the environment as in call J). Every built-in preset's memory points
# under today's defaults are measured again (llama-1b, micro-batch 8, with and without checkpointing: 16 points), so that
# tests/core/test_memory.py finds them; then goal 1 on llama-1b through this code path, fsdp and the Trainer's FSDP2 +
# Liger in both orders, and the 3B shape's pair where the call has time.
# Predictions (before the run): every point's allocated peak within 0.1 MB of its requested peak and 0-5 MB under the
# same preset's earlier point (torch's allocator); fsdp llama-1b noac 35,481,167,872 bytes as in call J (env path); the
# estimate's errors unchanged to 0.1%; fsdp 1.10-1.13x the Trainer with its peak ~1.27 MB under the Trainer's.
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs wk
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
cd .gpu/src
python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-1b', 42), f('llama-3.2-3b', 42))" 2>&1 | tail -1
echo "folders at $(el)s"
fits 260 && python3 benchmarks/gpu_memory.py --out $W/memory --budget-s 190 --lanes 4 --jobs "llama-1b:fsdp:liger:noac:8,llama-1b:fsdp:liger:ac:8,llama-1b:zero3:liger:noac:8,llama-1b:zero3:liger:ac:8,llama-1b:zero2:liger:noac:8,llama-1b:zero2:liger:ac:8,llama-1b:ddp:liger:noac:8,llama-1b:ddp:liger:ac:8,llama-1b:zero3_offload:liger:noac:8,llama-1b:zero3_offload:liger:ac:8,llama-1b:zero3_offload_all:liger:noac:8,llama-1b:zero3_offload_all:liger:ac:8,llama-1b:zero2_offload:liger:noac:8,llama-1b:zero2_offload:liger:ac:8,llama-1b:fsdp_offload:liger:noac:8,llama-1b:fsdp_offload:liger:ac:8" 2>&1 | q
G1="python3 benchmarks/gpu_peers.py --out $W/peers --micro-batch-size 8 --steps 20 --warmup 5"
G3="python3 benchmarks/gpu_peers.py --out $W/peers --model llama-3.2-3b --micro-batch-size 4 --steps 20 --warmup 6"
fits 220 && $G1 --pairs "fsdp=fsdp2_liger" --rounds 2 2>&1 | q
fits 180 && $G3 --pairs "fsdp=fsdp2_liger" 2>&1 | q
python3 - $W <<'P'
import json, sys, os
w = sys.argv[1]
if os.path.exists(f"{w}/memory/memory.json"):
    d = json.load(open(f"{w}/memory/memory.json")); rows = d["rows"] if isinstance(d, dict) else d
    for r in rows:
        c = r.get("config") or {}
        print(r["preset"], "ac" if r["activation_checkpointing"] else "noac", r["rc"], r.get("measured_bytes"),
              r.get("requested_bytes"), c.get("expandable_segments"), r.get("error"), r.get("wall_s"))
if os.path.exists(f"{w}/peers/gpu_peers.json"):
    for r in json.load(open(f"{w}/peers/gpu_peers.json"))["rows"]:
        for x in r["runs"]:
            print(r["shape"], r["system"], r["strategy"], x.get("tokens_per_s"), x.get("peak_memory_bytes"),
                  x.get("peak_requested_bytes"), ((x.get("config") or {}).get("expandable_segments")))
P
echo total $(el)s
