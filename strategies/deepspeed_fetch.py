"""zero3's `no-fetch-sync` lever: a one-rank ZeRO-3 fetch that does not make the host wait for the GPU.

Where a parameter's partition group has one rank, DeepSpeed 0.19.8 gathers nothing: its `_no_gather_coalesced`
(deepspeed/runtime/zero/partition_parameters.py) points each parameter at its partition, which is the whole tensor, and
returns a NoGatherHandle whose `wait` calls `current_stream().synchronize()`. The coordinator waits on it before every
module it fetches (each decoder layer in forward and again in backward, the embeddings, the final norm and head, the
persistent parameters after the step). The wait guards nothing there: the partition is already on this device (the
`.to` is the tensor itself) and the coordinator orders the compute stream after the fetch stream with `wait_stream`.

Here, for parameters of a model that installed this lever whose partitions are on the current device and not
quantized, the handle marks them available without the host wait; anything else (other models in the process,
offloaded or quantized partitions, several ranks, where DeepSpeed really gathers) takes DeepSpeed's own path. The
function replaced is private, so the lever is refused under any DeepSpeed but 0.19.8 (deepspeed_experiments.PRIVATE).

Measured on one H100 (results/2026-12-05g-h100.md), zero3 with its defaults, llama-1b micro-batch 8: with this lever
(and fused-step's clip factor filled on the device, not copied from the host) the host waits for the GPU 8 times a
step instead of 31, but the device idles as long (43.6 against 44.3 ms a step): DeepSpeed's module hooks (~49 ms of
host time in backward) keep it waiting, not the syncs. Tokens/s +0.7% on llama-1b (64,248 against 63,814) and +6.1%
on the 3B shape (20,956 against 19,745), each in one pair with the lever run second; two later pairs of another
setting, run in both orders, ran the second run 0.4% and 2.3% faster. So it is offered (`--experiments
lean-config,fused-step,no-fetch-sync`), not a default, until pairs in both orders say more: `SHARDLAB_AB=no-fetch-sync`
switches it off and on between the steps of one run (core/switches.py), off taking DeepSpeed's fetch.
"""
from __future__ import annotations

import torch

from shardlab.core import switches, trace

MARK = "_shardlab_no_fetch_sync"


def install(module: torch.nn.Module) -> None:
    """Mark `module`'s parameters, and route DeepSpeed's one-rank fetch through `_fetch` (once per process)."""
    from deepspeed.runtime.zero import partition_parameters as pp

    for param in module.parameters():
        setattr(param, MARK, True)
    if not getattr(pp._no_gather_coalesced, MARK, False):
        stock = pp._no_gather_coalesced

        def fetch(params):
            return _fetch(list(params), stock)

        setattr(fetch, MARK, True)
        pp._no_gather_coalesced = fetch


class _Resident:
    """The handle of a one-rank fetch whose partitions are already the parameters, on this device: nothing to wait for."""

    def __init__(self, params: list) -> None:
        self.params = params

    def wait(self, **kwargs) -> None:
        from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus

        for param in self.params:
            if param.ds_status == ZeroParamStatus.INFLIGHT:  # a second wait finds them available, as DeepSpeed's
                param.ds_status = ZeroParamStatus.AVAILABLE


def _fetch(params: list, stock):
    """DeepSpeed's one-rank fetch without its host wait, for marked parameters resident on this device."""
    from deepspeed.accelerator import get_accelerator
    from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus

    device = torch.device(get_accelerator().current_device_name())
    if not params or not switches.on("no-fetch-sync") or not all(getattr(p, MARK, False) and p.ds_tensor.device == device
                             and not hasattr(p.ds_tensor, "ds_quant_scale") for p in params):
        return stock(params)
    for param in params:
        if param.ds_status != ZeroParamStatus.NOT_AVAILABLE:  # DeepSpeed's check, in its words
            raise RuntimeError(f"expect param.ds_status == ZeroParamStatus.NOT_AVAILABLE, got{param.ds_summary()}")
        param.ds_status = ZeroParamStatus.INFLIGHT
        param.data = param.ds_tensor.data.view(param.ds_shape)
    if trace.enabled():
        trace.note("zero3-fetch-no-sync")
    return _Resident(params)
