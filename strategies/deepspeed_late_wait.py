"""zero3's `late-wait` lever (switchable, one of zero3's defaults): the step's two host waits for the GPU moved later.

On one H100 zero3's GPU idles ~44 ms a step against fsdp's ~15 (results/2026-12-05g-h100.md), and its two longest gaps
a step follow a host wait each: ~7 ms after DeepSpeed's epilogue waits for its gradient stream at the end of backward,
~4 ms after the step reads whether the clip norm is finite; in both, the host then runs Python while the GPU has
nothing queued. DeepSpeed 0.19.8's ZeRO-3 (deepspeed/runtime/zero/stage3.py) is changed in two places, on the
optimizer instance, only where the optimizer is on the accelerator, not under fp16 loss scaling, and torch's fused
AdamW steps every group (fused-step asks for it); anything else runs DeepSpeed's own:

1. `independent_gradient_partition_epilogue` flushes the last gradient bucket on DeepSpeed's reduce stream and then
   waits on the host for that stream (`reduce_and_partition_stream.synchronize()`). Here the current stream waits
   for it on the device (`wait_stream`), as DeepSpeed's own bucket fill does: what reads the gradients next (the clip
   norm) runs on the current stream. DeepSpeed records each gradient on the streams that use it, so the allocator
   reuses no memory early. CPU processes have no streams: nothing changes there.
2. `step` checks the clip norm for inf/NaN (`is_invalid_grad_norm`, a host read) before it queues the update. Here
   the check is made on the device and handed to the fused AdamW as `found_inf` (GradScaler's route: the kernel
   leaves parameters, moments and step count as they are where it is set), the update's kernels are queued, and only
   then is the check read. Where it failed, DeepSpeed's own overflow path runs as it would have (no step counted, the
   gradients cleared, the engine's skipped_steps); the parameters were left as they were by the kernel.

Values: unchanged (tests/recipes/test_lever_ab.py: the same losses as lean-config,fused-step alone, to the bit;
tests/strategies/test_zero3_late_wait.py: a step whose gradients hold a NaN skipped as DeepSpeed skips it; under CUDA on
one H100 too, the device-side wait made each step). Measured on one H100 against itself within one run (SHARDLAB_AB,
llama-1b micro-batch 8, 24 steps a side): 1.015x (95%: 1.012-1.022), predicted 1.01-1.03x
(results/2026-12-05i-late-wait.md); the 3B shape 1.018x (1.012-1.024), the peak unchanged to the byte
(results/2026-12-06b-h100.md), so a zero3 default since. Refused under any DeepSpeed but 0.19.8 and without fused-step
(deepspeed_experiments.py). With SHARDLAB_TRACE set, each step it runs is noted (`zero3-late-wait`), and each
device-side epilogue wait (`zero3-epilogue-device-wait`).
"""
from __future__ import annotations

import types

import torch

from shardlab.core import switches, trace

NAME = "late-wait"


def install(zero) -> None:
    """Both changes on this DeepSpeedZeroOptimizer_Stage3 instance (after fused-step's)."""
    zero.independent_gradient_partition_epilogue = types.MethodType(_epilogue, zero)
    zero.step = types.MethodType(_step, zero)


class _DeviceWait:
    """Stands for DeepSpeed's reduce stream inside its epilogue, once the last bucket is flushed; the one use left of
    the stream there is the host wait, which becomes the current stream waiting for it on the device."""

    def __init__(self, stream) -> None:
        self.stream = stream

    def synchronize(self) -> None:
        from deepspeed.accelerator import get_accelerator

        get_accelerator().current_stream().wait_stream(self.stream)
        if trace.enabled():
            trace.note("zero3-epilogue-device-wait")


def _epilogue(self) -> None:
    stock = type(self).independent_gradient_partition_epilogue
    stream = self.reduce_and_partition_stream
    if stream is None or self.offload_optimizer or not switches.on(NAME):
        return stock(self)
    from deepspeed.runtime.torch_autocast import sort_dtypes

    flush = self._DeepSpeedZeroOptimizer_Stage3__reduce_and_partition_ipg_grads
    for dtype in sort_dtypes(self.ipg_buckets.keys()):  # DeepSpeed's own flush, on its stream, as its epilogue does
        flush(dtype)
    self.reduce_and_partition_stream = _DeviceWait(stream)  # the epilogue then finds each bucket empty
    try:
        stock(self)
    finally:
        self.reduce_and_partition_stream = stream


def _runs_here(self) -> bool:
    """Where the reordered step is DeepSpeed's step: its optimizer on the accelerator, no fp16 loss scaling, no Muon
    or ZenFlow, and torch's fused AdamW (which reads found_inf) stepping every group."""
    return (switches.on(NAME) and not self.offload_optimizer and not self.swap_optimizer and self.dtype != torch.float16
            and not self.use_muon and not self.zenflow and self.torch_autocast_gradscaler is None
            and all(group.get("fused") for group in self.optimizer.param_groups))


def _step(self, closure=None):
    """DeepSpeed 0.19.8's ZeRO-3 step (stage3.py `step`) with its clip norm's inf/NaN check read after the update is
    queued, the fused AdamW skipping the update on the device where the check fails."""
    if not _runs_here(self):
        return type(self).step(self, closure)
    from deepspeed.runtime.utils import combine_grad_norm_groups
    from deepspeed.runtime.zero.stage3 import OPTIMIZER_STEP_TIMER

    self._pre_step()
    self._partition_all_parameters()
    self.overflow = False  # no fp16: DeepSpeed's overflow check before the norm does nothing
    scaled_norm = combine_grad_norm_groups(self._get_norm_groups())
    invalid = ~torch.isfinite(scaled_norm) | (scaled_norm < 0)  # is_invalid_grad_norm, without reading it
    timer_names = {OPTIMIZER_STEP_TIMER}
    self.timers(OPTIMIZER_STEP_TIMER).start()
    self.zero_grad(set_to_none=True)
    self.optimizer.found_inf = invalid.to(torch.float32)
    try:
        for sub_group_id in range(len(self.fp16_groups)):
            self._prepare_sub_group(sub_group_id, timer_names)
            self.unscale_and_clip_grads(sub_group_id, scaled_norm)
            self._optimizer_step(sub_group_id)
            self._reassign_or_swap_out_partitioned_parameters(sub_group_id)
            self._release_sub_group(sub_group_id, timer_names)
    finally:
        self.optimizer.found_inf = None
    self.timers(OPTIMIZER_STEP_TIMER).stop()
    if trace.enabled():
        trace.note("zero3-late-wait")
    self.overflow = bool(invalid)  # the step's host wait, its kernels already queued
    if self._loss_scale_update_and_overflow_cleanup():
        return
    self._global_grad_norm = scaled_norm / self.loss_scale
    self._post_step(timer_names)
    _warn_of_allocator_flushes(self)


def _warn_of_allocator_flushes(self) -> None:
    """The end of DeepSpeed's step: a warning where the allocator had to flush its cache since the last one."""
    from deepspeed.accelerator import get_accelerator
    from deepspeed.runtime.zero.stage3 import dist, logger

    retries = get_accelerator().memory_stats().get("num_alloc_retries") or 0
    if retries > self.n_caching_allocator_flushes:
        if dist.get_rank() == 0:
            logger.warning("%d pytorch allocator cache flushes since last step (high memory pressure; slow)",
                           retries - self.n_caching_allocator_flushes)
        self.n_caching_allocator_flushes = retries
