# Issue 16/17 on one H200 with the final code: zero3 on the tied 3B shape with every default; a HF-Trainer-style ds_config under auto.
set -u
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>&1 | tail -2
mkdir -p /tmp/sl/shardlab; for d in core strategies recipes; do ln -sfn $PWD/$d /tmp/sl/shardlab/$d; done
export PYTHONUNBUFFERED=1 SHARDLAB_CACHE=/tmp/cache PYTHONPATH=/tmp/site:/tmp/sl:$PWD
R="python3 -m shardlab.recipes.cli"
echo "== ds file at $(( $(date +%s) - T0 ))s"
$R plan --model llama-1b --deepspeed-config .gpu/hf_offload.json > $OUT/ds-plan.txt 2>&1; grep -v WARN $OUT/ds-plan.txt | head -20
timeout 240 $R run --model llama-1b --deepspeed-config .gpu/hf_offload.json --no-export --metrics none --output /tmp/ds > $OUT/ds-run.log 2>&1; echo "ds run rc=$? at $(( $(date +%s) - T0 ))s"
grep "^shardlab:\|error" $OUT/ds-run.log | head; cp /tmp/ds/summary.json $OUT/ds-summary.json 2>/dev/null
echo "== 3b zero3 at $(( $(date +%s) - T0 ))s"
timeout 300 $R run --strategy zero3 --model llama-3.2-3b --max-steps 12 --no-export --metrics none --output /tmp/z3 > $OUT/z3-run.log 2>&1; echo "z3 rc=$? at $(( $(date +%s) - T0 ))s"
grep "^shardlab:\|error" $OUT/z3-run.log | head; cp /tmp/z3/summary.json $OUT/z3-summary.json 2>/dev/null
python3 - <<'PY'
import json, os
for n in ("ds", "z3"):
    try:
        s = json.load(open(f"{os.environ['OUT']}/{n}-summary.json"))
    except OSError:
        continue
    c = s["config"]
    print(n, s["strategy"], c["precision"], "mb", c["micro_batch_size"], "accum", c["grad_accum"], "ac", c["activation_checkpointing"],
          "sched", c["lr_schedule"], c["warmup_steps"], c["max_steps"], "lr", c["lr"], "tokens/s", round(s["tokens_per_s"]),
          "mfu", s["mfu"] and round(s["mfu"], 4), "peak GiB", round(max(s["peak_memory_bytes"]) / 2**30, 1),
          "est GiB", round(s["memory_estimate"]["gpu_bytes"] / 2**30, 1), "losses", [round(x, 3) for x in s["losses"][:4]])
PY
echo total $(( $(date +%s) - T0 ))s
