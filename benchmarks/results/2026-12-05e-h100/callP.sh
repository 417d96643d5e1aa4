# Issue 21, session 2026-12-05 (fifth), call P (warm H100 after call A): where the 3B shape's step goes, shardlab fsdp
# (defaults) against the Trainer's FSDP2 + Liger, micro-batch 4: recipes/profile.py summaries (with the GPU's idle gaps).
set -u; T0=$(date +%s); source .gpu/setup.sh
W=/tmp/wp; mkdir -p $W; finish() { tar czf $OUT/wp.tgz -C /tmp wp; echo "tarred at $(el)s"; }
trap finish EXIT
cd .gpu/src
SHARDLAB_PROFILE=$W/prof-3b-fsdp.txt timeout 110 python3 -m shardlab.recipes.cli run --model llama-3.2-3b --precision bf16-mixed --seq-len 2048 --no-export --metrics none --strategy fsdp --micro-batch-size 4 --max-steps 10 --output $W/run > $W/run.log 2>&1; echo "ours rc $? at $(el)s"
timeout 120 torchrun --nproc_per_node 1 benchmarks/hf_peer.py --model llama-3.2-3b --mode fsdp2 --liger --micro-batch-size 4 --steps 4 --warmup 6 --profile $W/prof-3b-hf.txt --out $W/hf.json > $W/hf.log 2>&1; echo "hf rc $? at $(el)s"
echo total $(el)s
