"""DeepSpeed's ZeRO-2 and ZeRO-3 model states per rank, GPU and CPU, for the memory estimate (strategies/deepspeed.py
model_state_bytes): what each stage keeps through forward/backward and what its optimizer step adds."""
from __future__ import annotations

from shardlab.core.memory import ModelStates, Shape, Workload
from shardlab.strategies.deepspeed_offload import offloaded_share, sub_groups

# Model states per rank. Byte counts per parameter after the ZeRO paper (Rajbhandari et al. 2020, sec. 3:
# mixed-precision Adam holds 2 + 2 + 12 = 16 bytes per parameter), then checked against the allocator on one
# H200 (results/2026-12-03-memory-h200.md: every preset, Liger and torch kernels, with and without activation
# checkpointing, two micro-batches; the forward/backward and optimizer-step phases told apart by runs whose peak
# does not move with the micro-batch).
ZERO3_MAX_LIVE_PARAMETERS = 10**9  # DeepSpeed's default stage3_max_live_parameters
REDUCE_BUCKET_BYTES = 10**9  # DeepSpeed's default reduce_bucket_size (5e8 elements) in 16-bit
DEEPSPEED_SUB_GROUP_SIZE = 10**9  # DeepSpeed's default sub_group_size

# CPU offload, per process on one H200 (peak resident set of the rank, GiB): zero3_offload 24.8 (llama-1b) and
# 61.1 (3B shape); zero2_offload 30.4 and 66.7. Both grow by 18.5 bytes per parameter (16 of optimizer states
# plus DeepSpeed's pinned staging) on top of a fixed part per process (CUDA context, libraries, loading, pinned
# buffers): 6.3 GB for ZeRO-3, 12.3 GB for ZeRO-2 (which loads the whole fp32 model in every rank first).
# DeepSpeed's own estimator (16-18 bytes x 1.5) is 18-26% high on the 3B shape.
OFFLOAD_CPU_BYTES_PER_PARAM = 18.5
OFFLOAD_PROCESS_CPU_BYTES = {2: int(12.3e9), 3: int(6.3e9)}
# Parameter offload keeps the parameters on the CPU too: measured 29.6 GiB for llama-1b (one point).
PARAM_OFFLOAD_CPU_BYTES_PER_PARAM = 4.7


def zero2_states(n: int, w: Workload, offload: bool) -> ModelStates:
    """ZeRO-2. GPU through forward/backward: the 16-bit parameters (2n), the partitioned fp32 master and Adam
    states (12n / gpus) and the reduce bucket. The optimizer step adds the fp32 gradient partition and the
    16-bit averaged gradients (6n / gpus): llama-1b with checkpointing peaks at 22.6 GiB whatever the micro-batch
    (estimate 21.9), the 3B shape at 65.9 (61.3).
    Offload keeps the 16-bit parameters on the GPU, and the reduce bucket while layers' gradients arrive; the
    step holds 1.5 bytes per parameter of its partition more while updated parameters come back (the 3B shape:
    10.65 GiB at micro-batch 2 and 4 alike). CPU: see OFFLOAD_CPU_BYTES_PER_PARAM, per DeepSpeed's own
    layout (estimate_zero2_model_states_mem_needs: 16 bytes per parameter, or 4 per parameter and GPU)."""
    gpus = w.world_size
    if offload:
        cpu = int(n * max(4 * gpus, 16) * OFFLOAD_CPU_BYTES_PER_PARAM / 16) + OFFLOAD_PROCESS_CPU_BYTES[2] * w.gpus_per_node
        step_only = int(1.5 * n / gpus)  # this rank's partition coming back from the CPU (measured on one GPU)
        return ModelStates(gpu=2 * n + step_only, cpu=cpu, step_only=step_only, gradient_buckets=REDUCE_BUCKET_BYTES,
                           fixed_overhead=ZERO2_OFFLOAD_OVERHEAD)
    forward = 2 * n + int(12 * n / gpus) + REDUCE_BUCKET_BYTES
    step_only = int(6 * n / gpus)
    return ModelStates(gpu=forward + step_only, cpu=4 * n * w.gpus_per_node, step_only=step_only)


# zero2_offload on one H200, llama-1b with checkpointing: 4.42 / 5.64 GiB at micro-batch 4 / 8 under Liger, 5.98 under
# torch. The 16-bit parameters, the reduce bucket beside the recomputed layer and activations leave 0.23-0.31 GiB.
ZERO2_OFFLOAD_OVERHEAD = int(0.25 * 2**30)
# ZeRO-3 with offload keeps DeepSpeed's default buckets (ZERO3_TUNING is for zero3 alone). The allocator's history of
# two points (3B zero3_offload_all and llama-1b zero3_offload, checkpointing, micro-batch 4; results/2026-12-03-memory-
# h200/snapshot-*.json) shows a 16-bit buffer of reduce_bucket_size (1.0e9 bytes) allocated before training in both,
# no fetch buffer beside the parameters at world size 1 (the partition is the whole parameter), and the peak at a flush
# of the gradient bucket in backward: the flushed bucket (0.9 GiB) and an fp32 norm buffer of the gradients flushed
# (0.19 / 0.49 GiB), while the checkpoints of the layers already done are freed and no layer is recomputed. The
# estimate counts it in its recompute phase (every checkpoint and a recomputed layer) plus what the flush adds there:
# a decoder layer's gradients in fp32 (the norm buffer's scale; at most a bucket's, and this rank's partition of it)
# and 0.35e9 bytes. That constant is fitted: with it the 36 zero3_offload and zero3_offload_all points measured on one
# H200 (llama-1b, the 3B shape, Llama-2-7B) fall within -7.2% .. +7.5% (results/2026-12-03-memory-h200.md).
ZERO3_OFFLOAD_FLUSH_BYTES = int(0.35e9)


def zero3_states(s: Shape, w: Workload, offload_optimizer: bool, offload_params: bool, fused_step: bool = False,
                 sub_group_size: int = int(1e12), direct_grads: bool = False, gpu_accum: bool = False,
                 gpu_grads: bool = False) -> ModelStates:
    """ZeRO-3, the unit fetched whole being the larger of a decoder layer (shardlab's fetch unit, build_model) and
    the largest module (DeepSpeed's "largest layer").
    GPU through forward/backward: the fetched unit (4 bytes a parameter, DeepSpeed's convention) and the 16-bit
    parameter, 16-bit gradient, fp32 master and Adam partitions (16n / gpus: DeepSpeed's estimator counts 18,
    an fp32 gradient partition that exists only in the step). The step adds that and a 16-bit working copy
    (6n / gpus): llama-1b with checkpointing peaks at 22.97 GiB at micro-batch 4 and 8 alike (estimate 23.3),
    the 3B shape at 66.3 (67.8). zero3's fused-step (its default) casts the fp32 gradient straight from the flat
    16-bit buffer, so the step adds 4n / gpus: llama-1b with checkpointing 20.55 GiB (estimate 21.2), the 3B shape
    59.91 (61.8) (results/2026-12-05-zero3-experiments-h200.md). DeepSpeed steps the partition a sub-group at a time
    and frees each one's fp32 gradient before the next (_release_sub_group): the step adds that much of the largest
    sub-group (`sub_group_size`; zero3's 1e12 makes the partition one, its sub-groups lever 2e8). Under
    direct-grads (deepspeed_direct_grads.py) the AdamW reads the 16-bit gradient partition itself: the step adds
    nothing.
    Under gpu-accum (deepspeed_offload_accum.py) the gradient accumulation buffer of the parameters gpu-grads does
    not move (all of them without gpu-grads) is on the GPU: the model's 16-bit bytes each, for the whole run.
    Optimizer offload keeps the 16-bit parameter partition on the GPU (and DeepSpeed's buckets while layers'
    gradients arrive); parameter offload keeps up to stage3_max_live_parameters fetched back for compute, never
    more than optimizer offload alone holds; at world size 1 nothing is gathered beside them. Beside a recomputed
    layer: the bucket's flush (ZERO3_OFFLOAD_FLUSH_BYTES) and, under Liger, the tied output matrix's gradient that
    its fused loss makes in forward and that lives until the embedding's gradient is reduced at the end of
    backward (0.73 GiB in the 3B snapshot). DeepSpeed's bucket buffer (REDUCE_BUCKET_BYTES) is the fixed overhead.
    CPU: see OFFLOAD_CPU_BYTES_PER_PARAM; the optimizer states are partitioned over the node's GPUs (per node:
    n / nodes).
    A ratio R < 1 (w.offload_ratio) keeps the GPU's sub-groups' fp32 master and Adam moments (12 bytes a
    parameter) and their fp32 gradient partition (4, allocated once by DeepSpeed, not per step) on the GPU and off
    the CPU: 16 bytes x the GPU share (1 - offloaded_share, about 1 - R) of the partition move from the CPU side to
    the GPU side (torch AdamW's temporaries over one sub-group in the step are not counted). Measured on one H200
    (llama-1b, micro-batch 8, Liger, no checkpointing; results/2026-12-05b-offload-h200.md): R = 0.5 31.66 GiB, R = 0.25
    35.42 GiB, each 0.01 GiB above this estimate."""
    n, largest = s.params, max(s.largest_layer_params, s.decoder_layer_params)
    gpus, per_node, fetched = w.world_size, 1 / w.num_nodes, 4 * largest
    if offload_optimizer:
        resident = int(2 * n / gpus)
        if offload_params:  # fetched back for compute, bounded by what optimizer offload keeps resident
            resident = min(2 * min(n, ZERO3_MAX_LIVE_PARAMETERS), resident)
        per_param = OFFLOAD_CPU_BYTES_PER_PARAM + (PARAM_OFFLOAD_CPU_BYTES_PER_PARAM if offload_params else 0)
        cpu = int(n * per_param * per_node) + OFFLOAD_PROCESS_CPU_BYTES[3] * w.gpus_per_node
        # the GPU's sub-groups: fp32 master + Adam moments (12) and fp32 gradients (4); zero3_offload_all refuses a ratio
        if w.offload_ratio < 1 and not offload_params:
            kept = 1 - offloaded_share(s, gpus, w.offload_ratio)
            resident += int(16 * kept * n / gpus)
            cpu -= int(16 * kept * n * per_node)
        if gpu_accum and not offload_params:  # its accumulation buffer: what gpu-grads leaves in DeepSpeed's CPU one
            moved = offloaded_share(s, gpus, w.offload_ratio) if gpu_grads else 1.0
            resident += int(w.compute_bytes * moved * n / gpus)
        norm = 4 * min(s.decoder_layer_params, REDUCE_BUCKET_BYTES // 2) // gpus  # fp32, this rank's part of a bucket
        held = s.vocab * s.hidden * w.compute_bytes if s.tied and w.kernels == "liger" else 0
        return ModelStates(gpu=(fetched if gpus > 1 else 0) + resident, cpu=cpu, fixed_overhead=REDUCE_BUCKET_BYTES,
                           gradient_buckets=ZERO3_OFFLOAD_FLUSH_BYTES + norm + held)
    forward = fetched + int(16 * n / gpus)
    step_only = 0 if direct_grads else (4 if fused_step else 6) * min(int(n / gpus),
                                                                      max(sub_groups(s, gpus, sub_group_size)))
    return ModelStates(gpu=forward + step_only, cpu=int(largest * 4 * w.gpus_per_node * 1.5), step_only=step_only)
