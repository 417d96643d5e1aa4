# Written 2026-12-06 (seventeenth session) for a later one (not run: this session's device time was spent):
# `LIMIT=540 bash benchmarks/results/2026-12-06h-overlap/next.sh`, carrying .carry and .gpu (after `bash
# benchmarks/gpu_pack.sh --src`), timeout 580. Any one GPU.
# Why: DeepSpeed's overlap_comm, off in DeepSpeed's defaults, is now zero3_offload's default (+8-19% at the selector's
# offload batch, the peak the same to the byte; 2026-12-06h-overlap.md). The two other offload presets, zero2_offload and
# zero3_offload_all, still run DeepSpeed's defaults with it off, and each micro-batch's gradients cross PCIe the same
# way. This runs each at llama-1b's selector offload batch with a --deepspeed-config whose only change is overlap_comm
# true (no code changed), between two runs without it: one pair in both orders each.
# Predictions (before the run): zero3_offload_all +5-15% at the same peak (its gradients take zero3_offload's path);
# zero2_offload +3-12%, its peak up to 4.5 GiB higher (ZeRO-2's overlap_comm keeps more reduce buckets in flight,
# DeepSpeed's docs: 4.5x reduce_bucket_size). Where it holds, each becomes an overlap-comm lever and then a default with
# its memory points, as zero3_offload's did.
set -u; T0=$(date +%s); source .gpu/setup.sh; outputs wab
DEV=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$DEV"
cd .gpu/src
# each preset's own zero_optimization (DeepSpeed.ds_config) with overlap_comm true; the "auto" keys as in call X's file
Z='"bf16": {"enabled": "auto"}, "gradient_clipping": "auto", "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto"'
O='"overlap_comm": true, "contiguous_gradients": true, "offload_optimizer": {"device": "cpu", "pin_memory": true}'
echo "{$Z, \"zero_optimization\": {\"stage\": 2, $O}}" > $W/overlap2.json
echo "{$Z, \"zero_optimization\": {\"stage\": 3, $O, \"offload_param\": {\"device\": \"cpu\", \"pin_memory\": true}, \"stage3_gather_16bit_weights_on_model_save\": true}}" > $W/overlap3all.json
python3 -c "from shardlab.recipes.model import initial_folder as f; print(f('llama-1b', 42))" 2>&1 | tail -1
offload_batch llama-1b
B="python3 benchmarks/gpu_peers.py --out $W/peers --offload-steps 3 --offload-warmup 1 --micro-batch-size $MB --grad-accum $GA"
for p in "zero3_offload_all overlap3all" "zero2_offload overlap2"; do
  set -- $p
  fits 60 && $B --pairs "$1=" 2>&1 | q
  fits 60 && $B --pairs "$1=" --extra "--deepspeed-config $W/$2.json" --tag overlap-comm 2>&1 | q
  fits 60 && $B --pairs "$1=" --extra "--deepspeed-config $W/$2.json" --tag overlap-comm 2>&1 | q
  fits 60 && $B --pairs "$1=" 2>&1 | q
done
echo total $(el)s
