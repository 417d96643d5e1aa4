"""zero3_offload's `gpu-accum` lever: the gradient accumulation buffer on the GPU, so that gradients cross PCIe once a
step (at the accumulation boundary), not twice a micro-batch.

Under optimizer offload, DeepSpeed 0.19.8's ZeRO-3 accumulates a rank's gradients across micro-batches in one buffer in
pinned CPU memory (stage3.py `grad_partitions_flat_buffer`, in its grad_accum_dtype: the model's 16-bit dtype unless the
config names another). `partition_grads` then moves each parameter's reduced gradient across PCIe at every micro-batch:
- the first micro-batch copies it to the host, and back to the GPU (a copy used only at a boundary);
- each later micro-batch copies the host buffer to the GPU, adds there, and copies the sum back;
- the boundary then copies it once more, in fp32, into its sub-group's fp32 gradient on the CPU.
At the selector's offload batch (llama-1b, 16 x 4 on one H100) that is 20 bytes a parameter a step, 22 GB, beside
backward; zero3_offload ran 1.35x zero3's time per token there (results/2026-12-07e-offload-batch.md).

`gpu-grads` (deepspeed_offload_grads.py) removes this for the sub-groups stepped on the GPU (--offload-ratio below 1),
whose fp32 gradient is already there. This lever does it for the rest, at a memory cost: the parameters whose buffer is
still DeepSpeed's CPU one get a slice of one new buffer on the device their gradients are computed on, in the same
dtype. Then the first micro-batch copies on the GPU, later ones add on the GPU (as DeepSpeed's path does, after its
copy in), and the boundary's fp32 copy to the CPU is the only crossing: 4 bytes a parameter a step. The values are
those of DeepSpeed's path to the bit (the same adds in the same dtype on the same device); the GPU holds grad_accum_dtype
bytes per parameter moved more for the whole run (2 under bf16: 2.2 GB for llama-1b), which the estimate counts
(deepspeed_memory.zero3_states). DeepSpeed's CPU buffer stays allocated (it is one tensor) and unused.

Offered, not a default: on one H100 at the selector's offload batch it ran +6.5% tokens/s for +2.20 GB of peak
(results/2026-12-07g-gpu-accum.md; why not a default: deepspeed_experiments.py).
Refused under fp16 loss scaling, where DeepSpeed's overflow check reads the CPU buffer, and under any DeepSpeed but
0.19.8, whose private attribute it replaces (deepspeed_experiments.py). On CPU processes the new buffer is CPU memory,
like DeepSpeed's, so CI runs this code against DeepSpeed's losses to the bit (tests/strategies/test_offload_levers.py).
With SHARDLAB_TRACE set, each rank notes how many parameters moved (`zero3-offload-gpu-accum N`).
"""
from __future__ import annotations

import torch

from shardlab.core import trace
from shardlab.strategies.deepspeed_offload_grads import GRAD_BUFFERS


def install(zero) -> int:
    """Move each parameter's accumulation buffer that is still a slice of DeepSpeed's flat buffer (not gpu-grads'
    fp32 gradient) to a slice of one new buffer on the device of its 16-bit partition. Returns how many moved."""
    if not zero.offload_optimizer or zero.swap_optimizer:
        return 0
    buffers = getattr(zero, GRAD_BUFFERS)
    flat = zero.grad_partitions_flat_buffer
    start, end = flat.data_ptr(), flat.data_ptr() + flat.numel() * flat.element_size()
    moved = [p for group in zero.fp16_groups for p in group
             if p.ds_id in buffers and start <= buffers[p.ds_id].data_ptr() < end]
    if moved:
        device = moved[0].ds_tensor.device
        zero._shardlab_accum = torch.zeros(sum(buffers[p.ds_id].numel() for p in moved), dtype=flat.dtype, device=device)
        offset = 0
        for p in moved:
            n = buffers[p.ds_id].numel()
            buffers[p.ds_id] = zero._shardlab_accum.narrow(0, offset, n)
            offset += n
    if trace.enabled():
        trace.note(f"zero3-offload-gpu-accum {len(moved)}")
    return len(moved)
