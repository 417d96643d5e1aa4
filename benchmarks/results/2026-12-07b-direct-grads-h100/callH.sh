# Written 2026-12-07 (twenty-second session), after calls F and G; not run (349 s of device time left, too little to
# start a machine): `LIMIT=200 bash benchmarks/results/2026-12-07b-direct-grads-h100/callH.sh`, carrying .carry and
# .gpu (after `bash benchmarks/gpu_pack.sh`), timeout 220. Any one GPU (call F's peaks were an H100's).
# Why: goal 1 on llama-1b (micro-batch 8, no checkpointing): fsdp's peak is 822,272 bytes over the Trainer's FSDP2 +
# Liger (call F). Which tensors differ at the two peaks? The allocator's history of both, 3 steps each, named by site.
# Prediction: both peaks early in backward, the difference in small per-layer buffers (rstd caches, the batch, rope
# tables), not in the weights' or activations' big blocks.
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs wh
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
cd .gpu/src
fits 60 && timeout 100 torchrun --nproc_per_node 1 benchmarks/hf_peer.py --model llama-1b --mode fsdp2 --liger \
  --micro-batch-size 8 --steps 2 --warmup 1 --memory-snapshot $W/hf.pickle --out $W/hf.json 2>&1 | grep '^{'
echo "trainer at $(el)s"
fits 80 && SHARDLAB_MEMORY_SNAPSHOT=$W/fsdp.pickle timeout 120 python3 -m shardlab.recipes.cli run --model llama-1b \
  --strategy fsdp --kernels liger --micro-batch-size 8 --max-steps 3 --no-export --metrics none --output $W/fsdp \
  > $W/fsdp.log 2>&1; echo "fsdp rc $? at $(el)s"
python3 - $W <<'P'
import json, sys
from benchmarks.memory_snapshot import live_at_peak
w = sys.argv[1]
got = {}
for name in ("hf", "fsdp"):
    try:
        got[name] = live_at_peak(f"{w}/{name}.pickle", top=400)
    except FileNotFoundError:
        continue
    json.dump(got[name], open(f"{w}/snapshot-{name}.json", "w"), indent=1)
    print(name, {k: got[name][k] for k in ("baseline_bytes", "peak_bytes", "traced_live_at_peak_bytes", "peak_event")})
if len(got) == 2:
    def key(site):  # the same code line in both runs, whatever the install path
        return site.split("site-packages/")[-1].replace("/tmp/site/", "").replace("/tmp/sl/", "")
    a = {key(r["site"]): r["bytes"] for r in got["hf"]["by_site"]}
    b = {key(r["site"]): r["bytes"] for r in got["fsdp"]["by_site"]}
    for s in sorted(set(a) | set(b), key=lambda s: -abs(b.get(s, 0) - a.get(s, 0)))[:40]:
        print(f"{b.get(s, 0) - a.get(s, 0):+15,d}  fsdp {b.get(s, 0):15,d}  hf {a.get(s, 0):15,d}  {s}")
P
rm -f $W/*.pickle; echo total $(el)s
