"""zero3's `direct-grads` lever (`--experiments direct-grads`): the 16-bit gradients reach the AdamW without DeepSpeed's
passes that change nothing on one rank, and the AdamW reads them as they are.

fsdp's direct-grads (fsdp_direct_grads.py) made fsdp 4-8% faster; zero3 without this lever then ran 0.954x fsdp on
llama-1b and 0.929x on the 3B shape (one H100, results/2026-12-07b-direct-grads-h100.md). DeepSpeed 0.19.8's ZeRO-3
(deepspeed/runtime/zero/stage3.py), with zero3's other levers, moves each 16-bit gradient:
1. in each bucket's reduce (`__avg_scatter_grads` -> `reduce_scatter_coalesced`): concatenated into one buffer (4 bytes
   a parameter), divided by the world size in place (4) and reduce-scattered (on one rank, NCCL's copy of a buffer onto
   itself), then copied into the rank's gradient partition (4);
2. in the step, cast to an fp32 gradient per sub-group (6; fused-step already casts it from its flat buffer), which the
   fused AdamW reads (4) and, dividing by the clip factor, writes back (4).
Here:
1. on a one-rank partition group, a bucket's gradients go to their partitions as they are: concatenation, division by
   one and a one-rank reduce-scatter change no value;
2. the AdamW (strategies/adamw_kernel.py) reads each sub-group's 16-bit gradient partition once (2 bytes) and writes
   nothing back: no fp32 gradient, so the step holds 4 bytes a parameter of a sub-group less at its peak.
The values are the ones DeepSpeed steps with (the cast to fp32 is exact); on CPU the step is torch's fused AdamW on the
upcast gradients, the same to the bit as zero3's path without the lever (tests/strategies/test_zero3_direct_grads.py);
on a GPU a Triton kernel of the same arithmetic, within fp32 rounding of torch's. The Adam state stays torch's AdamW's
(its step count on the CPU), so checkpoints read as before, either way.

It works through fused-step (its clip is the AdamW's divisor) and with late-wait (the clip norm's inf/NaN check handed
to the kernel on the device; where it failed, DeepSpeed's skip runs and the step counts are taken back). Anything else
(optimizer offload, fp16 loss scaling, Muon, ZenFlow, a sub-group whose gradients are not one span, a reduce over more
than one rank) runs DeepSpeed's own code for that part. It replaces private methods of DeepSpeed 0.19.8, so it is
refused under any other (deepspeed_experiments.py PRIVATE), and so dropped from the defaults there.

A default since it measured faster (one H100, the same call, each pair in turn): llama-1b micro-batch 8 +3.5% / +5.6%
over zero3's other defaults, the 3B shape micro-batch 4 +7.1% / +7.7%; zero3 with it 0.988-0.999x fsdp on llama-1b and
0.996x / 0.999x on the 3B shape; every peak 3-8 KB over the defaults' (the kernel's argument tables), with and without
checkpointing, within 2.3% of the estimate. On CUDA, DeepSpeed's ZeRO-3 optimizer with a NaN step
(tests/strategies/late_wait_steps.py): the same skips and step counts as without it, Adam's moments within 2e-9, and
every bf16 weight the same but one, one bf16 rounding step apart (the Triton kernel's fp32 rounding against torch's).
"""
from __future__ import annotations

import types

import torch

from shardlab.core import trace
from shardlab.strategies import adamw_kernel
from shardlab.strategies.deepspeed_zero3_step import grad_span, release_grads

_MANGLED = "_DeepSpeedZeroOptimizer_Stage3__avg_scatter_grads"


def install(zero) -> None:
    """On this DeepSpeedZeroOptimizer_Stage3 instance, after fused-step's (and late-wait's) changes."""
    zero._shardlab_direct = {"spans": {}, "stepped": [], "tables": {},
                             "prepare": zero._prepare_fp32_grad_for_sub_group, "optimizer_step": zero._optimizer_step,
                             "step": zero.step}
    setattr(zero, _MANGLED, types.MethodType(_one_rank_scatter, zero))
    zero._prepare_fp32_grad_for_sub_group = types.MethodType(_keep_16bit_grads, zero)
    zero._optimizer_step = types.MethodType(_direct_step, zero)
    zero.step = types.MethodType(_step_then_count_back, zero)


def _one_rank_scatter(self, params, communication_data_type):
    """A bucket's gradients, each flattened, as their partitions where the partition group is one rank and nothing
    converts or scales them (DeepSpeed's __avg_scatter_grads otherwise)."""
    import deepspeed.comm as dist

    group = self._get_param_partition_group(params[0])
    if (dist.get_world_size(group=group) != 1 or communication_data_type != self.dtype
            or communication_data_type != self.gradient_accumulation_dtype or self.zenflow
            or (self.postscale_gradients and self.gradient_predivide_factor != 1.0)
            or self._gradient_averaging_world_size(params, 1) != 1):
        return getattr(type(self), _MANGLED)(self, params, communication_data_type)
    self._assert_same_partition_group(params)
    if trace.enabled():
        trace.note("zero3-one-rank-scatter")
    return [p.grad.reshape(-1) for p in params]


def _runs_here(self, sub_group_id) -> bool:
    group = self.optimizer.param_groups[self.sub_group_to_group_id[sub_group_id]]
    return (not self.offload_optimizer and not self.swap_optimizer and self.dtype != torch.float16
            and not self.use_muon and not self.zenflow and self.torch_autocast_gradscaler is None
            and bool(group.get("fused")) and not group.get("amsgrad") and not group.get("maximize"))


def _keep_16bit_grads(self, sub_group_id) -> None:
    """The sub-group's 16-bit gradient partitions, one span of DeepSpeed's flat buffer, kept for the step (no fp32
    gradient); where they are not one span, the cast before (fused-step's, else DeepSpeed's)."""
    own = self._shardlab_direct
    span = grad_span(self, sub_group_id) if _runs_here(self, sub_group_id) else None
    if span is None or adamw_kernel.requirements([self.fp32_partitioned_groups_flat[sub_group_id]], [span]):
        return own["prepare"](sub_group_id)
    release_grads(self, sub_group_id)
    own["spans"][sub_group_id] = span


def _direct_step(self, sub_group_id) -> None:
    """The sub-group's AdamW step from its kept 16-bit gradient, with torch's AdamW's options and state; the clip
    (fused-step's grad_scale) and late-wait's found_inf as the fused AdamW would take them. DeepSpeed's otherwise."""
    own = self._shardlab_direct
    span = own["spans"].pop(sub_group_id, None)
    if span is None:
        return own["optimizer_step"](sub_group_id)
    optimizer = self.optimizer
    group = optimizer.param_groups[self.sub_group_to_group_id[sub_group_id]]
    fp32 = self.fp32_partitioned_groups_flat[sub_group_id]
    state = adamw_kernel.state_of(optimizer, fp32)
    try:
        adamw_kernel.step([fp32], [span], [state["exp_avg"]], [state["exp_avg_sq"]], [state["step"]],
                          **adamw_kernel.options(group), grad_scale=getattr(optimizer, "grad_scale", None),
                          found_inf=getattr(optimizer, "found_inf", None), tables=own["tables"])
    finally:
        optimizer.grad_scale = None  # as fused-step's step: no later step reads a stale factor
    own["stepped"].append(state["step"])
    if trace.enabled():
        trace.note("zero3-direct-grads")


def _step_then_count_back(self, closure=None):
    """The ZeRO-3 step (late-wait's or DeepSpeed's); where it was skipped after the kernels ran (late-wait reads the
    norm's check after queuing them, which then stepped nothing), the step counts taken back."""
    own = self._shardlab_direct
    own["stepped"] = []
    try:
        return own["step"](closure)
    finally:
        if self.overflow and own["stepped"]:
            torch._foreach_sub_(own["stepped"], 1)
        own["stepped"] = []
        own["spans"].clear()
