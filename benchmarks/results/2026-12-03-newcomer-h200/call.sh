# Issue 17 on one H200: the newcomer's command with every default, and plan vs run's resolved object.
set -u
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>&1 | tail -2
mkdir -p /tmp/sl/shardlab; for d in core strategies recipes; do ln -sfn $PWD/$d /tmp/sl/shardlab/$d; done
export PYTHONUNBUFFERED=1 SHARDLAB_CACHE=/tmp/cache PYTHONPATH=/tmp/site:/tmp/sl:$PWD
cd /tmp && mkdir -p newcomer && cd newcomer
python3 -m shardlab.recipes.cli plan --model llama-1b --json > $OUT/plan.json 2> $OUT/plan.err; echo "plan rc=$? at $(( $(date +%s) - T0 ))s"
python3 -m shardlab.recipes.cli plan --model llama-1b > $OUT/plan.txt 2>&1
echo "== recipe run --strategy auto --model llama-1b"
timeout 420 python3 -m shardlab.recipes.cli run --strategy auto --model llama-1b > $OUT/run.log 2>&1; echo "run rc=$? at $(( $(date +%s) - T0 ))s"
grep "^shardlab:" $OUT/run.log; tail -3 $OUT/run.log
cp runs/fsdp/summary.json runs/fsdp/resolved.json $OUT/ 2>/dev/null
python3 - <<'PY'
import json, os
out = os.environ["OUT"]
s = json.load(open(f"{out}/summary.json")); r = json.load(open(f"{out}/resolved.json")); p = json.load(open(f"{out}/plan.json"))["resolved"]
print("tokens/s", round(s["tokens_per_s"]), "mfu", round(s["mfu"], 4), "peak GiB", round(max(s["peak_memory_bytes"]) / 2**30, 1),
      "estimate GiB", round(s["memory_estimate"]["gpu_bytes"] / 2**30, 1), "mb", s["config"]["micro_batch_size"], "seq", s["config"]["seq_len"],
      "kernels", s["config"]["kernels"], "losses", [round(x, 4) for x in s["losses"][:3]], s["losses"][-1])
print("plan == run resolved:", p == r, [k for k in r if p.get(k) != r.get(k)])
PY
echo total $(( $(date +%s) - T0 ))s
