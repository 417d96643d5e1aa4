"""zero3's `no-nvtx` lever (offered, not a default): DeepSpeed's NVTX ranges off.

DeepSpeed 0.19.8 wraps its ZeRO-3 functions (the coordinator's fetch and release, the per-module hooks, the gradient
reduction down to each gradient added to a bucket: `@instrument_w_nvtx` on 61 functions of deepspeed/runtime, 47 of
them in runtime/zero) in an NVTX range named after the function, for Nsight Systems. On a CUDA accelerator each range
is a push and a pop, each through the accelerator's Python (`range_push` looks up an NVTX domain, then calls
torch.cuda.nvtx) whether or not anything records them; nothing reads them unless nsys runs. A one-rank zero3 step of
llama-1b's 22-layer structure pushes 1,195 ranges (results/2026-12-05h-ab.md), and on one H100 zero3's GPU idles ~44 ms
a step waiting for the host (results/2026-12-05g-h100.md). The lever sets DeepSpeed's module flag
`deepspeed.utils.nvtx.enable_nvtx` False, so each wrapper calls its function alone; the flag is read at every call, so
`SHARDLAB_AB=no-nvtx` switches it off and on between steps. What is lost: DeepSpeed's ranges in an nsys timeline.
Values: unchanged, the ranges touch no tensor (tests/recipes/test_lever_ab.py: the same losses to the bit). With
SHARDLAB_TRACE set, each range DeepSpeed still pushes is noted (`deepspeed-nvtx-range`), so a test can see where the
lever was off. Refused under any DeepSpeed but 0.19.8, whose flag was read (deepspeed_experiments.PRIVATE).
"""
from __future__ import annotations

from shardlab.core import switches, trace

NAME = "no-nvtx"


def install() -> None:
    """DeepSpeed's NVTX ranges off in this process, back on while an A/B has the lever switched off."""
    from deepspeed.utils import nvtx

    nvtx.enable_nvtx = False
    switches.listen(NAME, lambda on: setattr(nvtx, "enable_nvtx", not on))
    if trace.enabled() and not getattr(nvtx._range_push, "_shardlab_counted", False):
        stock = nvtx._range_push

        def counted(accelerator, msg):
            trace.note("deepspeed-nvtx-range")
            return stock(accelerator, msg)

        counted._shardlab_counted = True
        nvtx._range_push = counted
