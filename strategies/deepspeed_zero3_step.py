"""zero3's `fused-step` lever (on by default, `--experiments none` without): three changes to DeepSpeed's ZeRO-3 step.

A reading of DeepSpeed 0.19.8 for where a one-GPU ZeRO-3 step spends ~18 ms more than FSDP2's (llama-1b, 61,241 against
65,579 tokens/s, results/2026-12-04b-peers-h200.md) found, among others, three passes over every gradient that FSDP2's
step does not make. Each is replaced on the ZeRO-3 optimizer instance (DeepSpeedZeroOptimizer_Stage3), only where the
run has no model or expert parallelism and keeps its optimizer on the accelerator; anything else takes DeepSpeed's own:

1. The clip norm (`get_grad_norm_direct`): DeepSpeed upcasts each gradient partition to fp64 and takes its norm, one
   tensor at a time (~18 bytes a parameter written and read, ~600 launches). Here: one `torch._foreach_norm` in fp32,
   as torch's clip_grad_norm_ (and so FSDP2's) does. The norm is rounded in fp32 instead of fp64.
2. The fp32 gradient (`_prepare_fp32_grad_for_sub_group`): DeepSpeed concatenates the gradient partitions, which are
   already adjacent slices of one flat buffer, then casts the copy to fp32. Here: one cast of the span they occupy.
3. The clip itself (`unscale_and_clip_grads`): DeepSpeed multiplies the fp32 gradient by the clip (and loss-scale)
   factor in a pass of its own. Here, where the optimizer is torch's fused AdamW, the factor is handed to it as
   `grad_scale`, which its kernel divides by while it steps (GradScaler's own route); the adapter asks for the fused
   AdamW under this experiment, on CPU processes too, so that CI runs the same path.

The methods are DeepSpeed's private ones, so the lever is refused under any DeepSpeed but 0.19.8, and left out of
zero3's defaults there (deepspeed_experiments.py PRIVATE_DEEPSPEED). Predicted on one H200: +2.4 .. 4.3% tokens/s.
Measured (results/2026-12-05-zero3-experiments-h200.md): alone 57,381 against stock 57,841 tokens/s (-0.8%); with
lean-config 67,677 against lean-config alone 64,668 (+4.7%): the timer's syncs hid what it saves.
"""
from __future__ import annotations

import types
from typing import Optional

import torch

from shardlab.core import trace
from shardlab.strategies._common import clip_divisor

def install(zero) -> None:
    """Replace the three steps on this DeepSpeedZeroOptimizer_Stage3 instance (ZeRO-3 without optimizer offload)."""
    zero.get_grad_norm_direct = types.MethodType(_grad_norm_fp32, zero)
    zero._prepare_fp32_grad_for_sub_group = types.MethodType(_fp32_grad_from_span, zero)
    zero.unscale_and_clip_grads = types.MethodType(_clip_in_optimizer, zero)
    zero._optimizer_step = types.MethodType(_optimizer_step_then_clear, zero)


def _grad_norm_fp32(self, gradients, params, norm_type=2):
    """The L2 norm of this rank's gradient partitions over the partition group, in fp32, or -1 where not finite."""
    stock = type(self).get_grad_norm_direct
    if not gradients or float(norm_type) != 2.0 or self.model_parallel_group is not None \
            or self._autoep_expert_parallel_group(params) is not None:
        return stock(self, gradients, params, norm_type)
    import deepspeed.comm as dist

    self._assert_same_partition_group(params)
    group = self._get_param_partition_group(params[0])
    norms = torch._foreach_norm(list(gradients), 2.0, dtype=torch.float32)
    total = torch.stack(norms).square().sum()
    dist.all_reduce(total, op=dist.ReduceOp.SUM, group=group)
    total = total.sqrt()
    if trace.enabled():
        trace.note("zero3-norm-fp32")
    return torch.where(total.isfinite(), total, torch.full_like(total, -1.0))


def _span(tensors: list[torch.Tensor]) -> Optional[torch.Tensor]:
    """One 1-D view over `tensors` if they are adjacent contiguous slices of one storage, in order; else None."""
    first = tensors[0]
    end = first.data_ptr()
    for t in tensors:
        if t.dtype != first.dtype or not t.is_contiguous() or t.data_ptr() != end \
                or t.untyped_storage().data_ptr() != first.untyped_storage().data_ptr():
            return None
        end += t.numel() * t.element_size()
    return first.as_strided((sum(t.numel() for t in tensors),), (1,))


def grad_span(zero, sub_group_id) -> Optional[torch.Tensor]:
    """The sub-group's 16-bit gradient partitions as one span of the flat buffer they live in, as long as its fp32
    partition; None where they are not (DeepSpeed's concatenation then)."""
    grads = zero.averaged_gradients[sub_group_id]
    span = _span(grads) if grads else None
    whole = span is not None and span.numel() == zero.fp32_partitioned_groups_flat[sub_group_id].numel()
    return span if whole else None


def release_grads(zero, sub_group_id) -> None:
    """The sub-group's gradient partitions let go once read (as DeepSpeed: read on this stream, reduced on another)."""
    from deepspeed.accelerator import get_accelerator

    if not get_accelerator().is_synchronized_device():
        for grad in zero.averaged_gradients[sub_group_id]:
            if get_accelerator().on_accelerator(grad):
                grad.record_stream(get_accelerator().current_stream())
    zero.averaged_gradients[sub_group_id] = None


def _fp32_grad_from_span(self, sub_group_id):
    """The sub-group's fp32 gradient as one cast of the flat buffer its partitions live in (no concatenation)."""
    span = grad_span(self, sub_group_id)
    if span is None:
        return type(self)._prepare_fp32_grad_for_sub_group(self, sub_group_id)
    fp32 = self.fp32_partitioned_groups_flat[sub_group_id]
    fp32.grad = span.to(fp32.dtype, copy=True)
    release_grads(self, sub_group_id)
    if trace.enabled():
        trace.note("zero3-grad-span")


def _clip_in_optimizer(self, sub_group_id, total_norm):
    """The clip and loss-scale factor as the fused AdamW's grad_scale (its kernel divides); DeepSpeed's pass otherwise."""
    group = self.optimizer.param_groups[self.sub_group_to_group_id[sub_group_id]]
    if not group.get("fused"):
        return type(self).unscale_and_clip_grads(self, sub_group_id, total_norm)
    if self.clip_grad == 0. and self.loss_scale == 1.:  # nothing to scale: DeepSpeed would still multiply by 1
        return
    device = self.fp32_partitioned_groups_flat[sub_group_id].device  # its gradient's (none under direct-grads)
    # a fill on the device: torch.tensor(x, device=...) copies from pageable memory and waits for the GPU
    combined = torch.full((), float(self.loss_scale), dtype=torch.float32, device=device)
    if self.clip_grad > 0.:  # DeepSpeed's arithmetic: the norm is of the scaled gradients
        combined = clip_divisor(total_norm.to(device, torch.float32) / self.loss_scale, self.clip_grad) * self.loss_scale
    self.optimizer.grad_scale = combined.reshape(())
    if trace.enabled():
        trace.note("zero3-clip-in-adamw")


def _optimizer_step_then_clear(self, sub_group_id):
    """DeepSpeed's sub-group step, then the grad_scale cleared so that no later step reads a stale factor."""
    try:
        return type(self)._optimizer_step(self, sub_group_id)
    finally:
        self.optimizer.grad_scale = None
