"""zero3_offload's `gpu-grads` lever: under partial offload (--offload-ratio R < 1), the gradients of the sub-groups
DeepSpeed steps on the GPU are accumulated on the GPU, in each sub-group's fp32 gradient, not in pinned CPU memory.

Under optimizer offload, DeepSpeed 0.19.8's ZeRO-3 keeps one gradient accumulation buffer for a rank's whole partition
in CPU memory (stage3.py: `grad_partitions_flat_buffer`, on `self.device`, which offload makes the CPU). It is kept in
DeepSpeed's grad_accum_dtype, which is the model's 16-bit dtype unless the config names another. `partition_grads` then
moves each parameter's reduced gradient across PCIe at every micro-batch, whatever R is:
- the first micro-batch copies it to the host, and back to the GPU;
- each later micro-batch copies the host buffer to the GPU, adds, and copies the sum back;
- the accumulation boundary copies it once more, into its sub-group's fp32 gradient.

For a sub-group the GPU steps (the first 1 - R of them), that fp32 gradient is a GPU tensor that DeepSpeed allocates
once and keeps for the run. On one H100 (llama-1b, 16 x 4, results/2026-12-06d-liger-compile.md), R = 0.25 and
R = 0.1 ran level (54,678 / 55,752 tokens/s) and 24% under fsdp: the cost did not shrink with the CPU's share.

Here each parameter of such a sub-group accumulates straight into its slice of that fp32 gradient:
- the first micro-batch's copy casts into it, and later ones add to it;
- the boundary's copy is then of the tensor onto itself, which torch skips.
No memory is added: the fp32 gradient already exists, and the temporary GPU copies are gone. The sub-groups the CPU
steps keep DeepSpeed's path. Measured on one H100 (llama-1b, 16 x 4, R = 0.1; results/2026-12-06f-offload.md): 57,783
-> 64,585 tokens/s (+11.8%), the peak the same to the byte; zero3_offload's default since. At R = 1 on a GPU every
sub-group steps on the CPU, so it changes nothing there (its memory points: the same bytes as DeepSpeed's path).

Values:
- in fp32, and at accumulation 1 in any precision, the same to the bit;
- under 16-bit precision with accumulation, those sub-groups sum their micro-batches in fp32 (as fsdp does), not in
  DeepSpeed's 16-bit buffer.

On CPU processes every sub-group is stepped on the CPU, where its gradients are computed, so all of them take the
lever and CI runs this code (tests/strategies/test_offload_levers.py: DeepSpeed's losses to the bit, with
accumulation). Refused under fp16 loss scaling, where DeepSpeed's overflow check reads the CPU buffer, and under any
DeepSpeed but 0.19.8, whose private attribute it replaces (deepspeed_experiments.py). With SHARDLAB_TRACE set, each
rank notes how many parameters took it (`zero3-offload-gpu-grads N`).
"""
from __future__ import annotations

from shardlab.core import trace

GRAD_BUFFERS = "_DeepSpeedZeroOptimizer_Stage3__param_id_to_grad_partition"  # ds_id -> the parameter's accumulation buffer


def install(zero) -> int:
    """Point each parameter's accumulation buffer at its slice of its sub-group's fp32 gradient, for the sub-groups
    whose fp32 gradient is on the device the parameter's gradient is computed on. Returns how many took it."""
    if not zero.offload_optimizer or zero.swap_optimizer:
        return 0
    buffers = getattr(zero, GRAD_BUFFERS)
    moved = 0
    for i, group in enumerate(zero.fp16_groups):
        grad = zero.fp32_partitioned_groups_flat[i].grad
        if grad is None:
            continue
        for param in group:
            sub_group, offset, numel = zero.grad_position[zero.get_param_id(param)]
            if param.ds_id not in buffers or sub_group != i or grad.device != param.ds_tensor.device:  # CPU-stepped
                continue
            buffers[param.ds_id] = grad.narrow(0, offset, numel)
            moved += 1
    if trace.enabled():
        trace.note(f"zero3-offload-gpu-grads {moved}")
    return moved
