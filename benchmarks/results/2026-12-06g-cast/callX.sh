# Written 2026-12-06 (sixteenth session) before its run, right after call W: `LIMIT=450 bash
# benchmarks/results/2026-12-06g-cast/callX.sh`, carrying .carry and .gpu (after `bash benchmarks/gpu_pack.sh --src`),
# timeout 480. Any one GPU.
# Why: call W put zero3_offload's defaults on the 3B shape at the selector's batch (8 x 8 on an H100) at 0.85x the
# Trainer's offload + Liger (8.95 s against 7.61 s a step). zero3_offload runs DeepSpeed's zero_optimization defaults
# with overlap_comm false (strategies/deepspeed.py: only zero3 took Lightning's tuning), so under offload every
# micro-batch's gradient copies to pinned CPU memory and back run on the compute stream; the Trainer's config has
# overlap_comm true, buckets of hidden^2. This call runs zero3_offload on the 3B shape at that batch three ways through
# --deepspeed-config (no code changed): overlap_comm true with DeepSpeed's other defaults; the Trainer's whole config;
# and zero3_offload's own config (the same-call baseline).
# Predictions (before the run): the baseline 14,300-15,000 tokens/s (call W: 14,638); overlap_comm true +8-18%; the
# Trainer's config within 3% of overlap_comm true; the peak within 2 GiB of the baseline's 46.76 GiB.
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs wx
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
cd .gpu/src
Z='"bf16": {"enabled": "auto"}, "gradient_clipping": "auto", "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto"'
O='"offload_optimizer": {"device": "cpu", "pin_memory": true}'
echo "{$Z, \"zero_optimization\": {\"stage\": 3, \"overlap_comm\": true, \"contiguous_gradients\": true, $O}}" > $W/overlap.json
echo "{$Z, \"zero_optimization\": {\"stage\": 3, \"overlap_comm\": true, \"contiguous_gradients\": true, \"reduce_bucket_size\": \"auto\", \"stage3_prefetch_bucket_size\": \"auto\", \"stage3_param_persistence_threshold\": \"auto\", $O}}" > $W/trainer.json
python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-3.2-3b', 42))" 2>&1 | tail -1
echo "init at $(el)s"
offload_batch llama-3.2-3b
B="python3 benchmarks/gpu_peers.py --out $W/peers --model llama-3.2-3b --offload-steps 3 --offload-warmup 1 --micro-batch-size $MB --grad-accum $GA"
fits 120 && $B --pairs "zero3_offload=" --extra "--deepspeed-config $W/overlap.json" --tag overlap 2>&1 | q
fits 130 && $B --pairs "zero3_offload=" 2>&1 | q
fits 120 && $B --pairs "zero3_offload=" --extra "--deepspeed-config $W/trainer.json" --tag trainer-config 2>&1 | q
echo total $(el)s
