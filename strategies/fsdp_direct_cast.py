"""fsdp's `direct-cast` lever (`--experiments direct-cast`): FSDP2 on one rank with one copy where torch makes two.

On a one-rank mesh FSDP2 gathers nothing, and torch 2.11-2.13 special-case it, but with extra copies:
- unshard (FSDPParamGroup.wait_for_unshard): each fp32 weight is cast into a new 16-bit tensor (`all_gather_inputs`),
  which is then copied into the weight the layer computes with: two kernels and a temporary a weight, one weight at a
  time, before every layer's forward and again before its backward;
- reduce (foreach_reduce): the layer's gradients are copied into one buffer, and that buffer is copied whole into a
  second one, which the gradients then view.
On one H200 (llama-1b, micro-batch 8; results/2026-12-05b-offload-h200/profile-fsdp.txt) that was 3.84 ms of casts
(449 launches), 3.37 ms of device-to-device copies (428) and 3.41 ms of buffer copies a step, of a 248 ms step.

Here, on each FSDP module of a one-rank mesh:
1. unshard: one `torch._foreach_copy_` casts every fp32 shard of the group straight into its 16-bit weight (the same
   rounding as the `.to()` it replaces, no temporary);
2. reduce: the reduce-scatter's output buffer is its input buffer (a ReduceScatter whose `allocate` hands the input
   back, through FSDP2's public `set_custom_reduce_scatter`), so torch's copy is of a tensor onto itself, which torch
   skips.
The values do not change: CPU losses identical to torch's path to the bit (tests/strategies/test_fsdp_direct_cast.py).
Anything torch's own path handles differently keeps it: a weight with its own all-gather (float8), CPU offload, a
mesh of more than one rank (there FSDP2 already casts with foreach copies into its all-gather buffer).

Measured (one H100, torch 2.11; results/2026-12-05e-h100.md): llama-1b micro-batch 8, 66,180 against 64,820
tokens/s (+2.1%), the peak unchanged to the byte; its cast is one foreach kernel a layer (5.7 ms a step, where torch's
cast and copy took 7.2 ms on the H200) and the gradient buffer's copy is gone.

The unshard replaces a private method of torch's FSDP2, so the lever is refused under a torch whose code was not read
for it (VERIFIED_TORCH) and left out of fsdp's defaults there. `SHARDLAB_AB=direct-cast` switches it off and on between
steps of one run (core/switches.py): off, the unshard is torch's and the reduce gets two buffers and torch's copy.
"""
from __future__ import annotations

import contextlib
import functools
import math
import types
from importlib.metadata import version

from shardlab.core import switches, trace

VERIFIED_TORCH = ("2.11", "2.12", "2.13")  # FSDPParamGroup.wait_for_unshard's one-rank branch read in each


def refusal() -> str:
    """Why direct-cast cannot run under the installed torch ('' where it can)."""
    installed = version("torch")
    if ".".join(installed.split("+")[0].split(".")[:2]) in VERIFIED_TORCH:
        return ""
    return (f"written against the private FSDP2 code of torch {', '.join(VERIFIED_TORCH)}, and torch {installed} is "
            f"installed; pip install torch==2.13.0 or drop the experiment")


def install(model) -> int:
    """Both replacements on every FSDP module of `model`, sharded over a one-rank mesh; returns how many took them."""
    from torch.distributed.fsdp import FSDPModule

    groups = 0
    for module in model.modules():
        group = module._get_fsdp_state()._fsdp_param_group if isinstance(module, FSDPModule) else None
        if group is None or group.mesh_info.shard_mesh_size != 1:
            continue
        group.wait_for_unshard = types.MethodType(_wait_for_unshard, group)
        module.set_custom_reduce_scatter(_reduce_in_place()())
        groups += 1
    return groups


def _wait_for_unshard(self) -> None:
    """FSDPParamGroup.wait_for_unshard on a one-rank mesh: the group's fp32 shards cast into its 16-bit weights at once."""
    if not self._all_gather_result:
        return  # no preceding unshard
    params = self.fsdp_params
    if not switches.on("direct-cast") or any(p.sharded_state.name != "SHARDED" or p.offload_to_cpu or hasattr(p._sharded_local_tensor, "fsdp_pre_all_gather")
           for p in params):
        return type(self).wait_for_unshard(self)
    import torch
    from torch.distributed.fsdp._fully_shard._fsdp_param import alloc_storage

    weights = []
    for p in params:
        source = p._sharded_param_data
        p.init_all_gather_outputs([source.numel()], [p.param_dtype or source.dtype], 1, self.device)
        alloc_storage(p.all_gather_outputs[0])  # freed when the layer resharded
        weights.append(p.all_gather_outputs[0])
    with torch.no_grad(), contextlib.ExitStack() as versions:
        for w in weights:  # as torch's own copy: refilling a weight autograd saved is not an in-place change of it
            versions.enter_context(torch.autograd._unsafe_preserve_version_counter(w))
        torch._foreach_copy_(weights, [p._sharded_param_data for p in params])
    for p in params:
        p.init_unsharded_param()
    self._to_unsharded()
    event = self.device_handle.Event()
    event.record()
    self._wait_all_gather_streams_on_event(event)
    self._all_gather_result = None
    if trace.enabled():
        trace.note("fsdp-direct-cast")


@functools.cache
def _reduce_in_place() -> type:
    """The one-rank reduce-scatter: foreach_reduce asks for the input buffer, then for an output of the same size and
    dtype, and gets the input again; the copy of one onto the other is then a no-op."""
    import torch
    from torch.distributed.fsdp._fully_shard._fsdp_api import ReduceScatter

    class ReduceInPlace(ReduceScatter):
        def __init__(self) -> None:
            self._input = None

        def allocate(self, size, *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
            given, self._input = self._input, None
            if not switches.on("direct-cast"):  # switched off (SHARDLAB_AB): two buffers, and torch's copy between them
                return torch.empty(*size, dtype=dtype, device=device)
            if given is not None and given.numel() == math.prod(int(s) for s in size) and given.dtype == dtype:
                if trace.enabled():
                    trace.note("fsdp-reduce-in-place")
                return given
            self._input = torch.empty(*size, dtype=dtype, device=device)
            return self._input

        def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
            raise RuntimeError("direct-cast's one-rank reduce-scatter was called for a reduce over more than one rank")

    return ReduceInPlace
