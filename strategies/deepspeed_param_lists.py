"""zero3's `param-lists` lever (offered, not a default): each module's parameter list built once, not at every use.

DeepSpeed 0.19.8's ZeRO-3 coordinator asks `iter_params(module, recurse)` (deepspeed/runtime/zero/
partitioned_param_coordinator.py) for a module's parameters at every fetch and release of it, forward and backward,
several times each (the fetch, the release, the parameters to release), and for the whole model twice after every
step (`release_and_reset_all`, and again in `partition_all_parameters`). Each answer walks the module's submodules
(`named_parameters`: a decoder layer is a leaf unit here, so its 9 submodules), builds the list anew and wraps the walk
in an NVTX range. On llama-1b's 22-layer structure that Python is ~6% of a one-rank zero3 step on a CPU where a step is
mostly host work (results/2026-12-05h-ab.md), and on one H100 zero3's GPU waits ~44 ms a step for the host
(results/2026-12-05g-h100.md). Against itself within one run on one H100 (llama-1b micro-batch 8, SHARDLAB_AB): 1.005x
(95%: 0.999-1.013), under half the 1.01-1.02x predicted (results/2026-12-05i-late-wait.md): not a default.

Here the modules of the model that installed the lever keep their own parameters, walked once at the first use, as a
tuple, and the answer is that tuple followed by the module's external parameters of the moment (DeepSpeed registers
those during forward, so they are never cached): the same parameters in the same order as DeepSpeed's walk, as long
as no parameter is added to or replaced in the model after DeepSpeed's initialize, which the recipe never does.
Anything else (other models, a lever switched off by SHARDLAB_AB) takes DeepSpeed's own walk. Values: unchanged (the
same parameters are fetched and released; tests/recipes/test_lever_ab.py: the same losses to the bit). The function
replaced is private, so the lever is refused under any DeepSpeed but 0.19.8 (deepspeed_experiments.PRIVATE).
"""
from __future__ import annotations

import itertools

import torch

from shardlab.core import switches, trace

NAME = "param-lists"
LISTS = "_shardlab_param_lists"  # on each module of the model: {recurse: its parameters, walked once}


def install(model: torch.nn.Module) -> None:
    """Give `model`'s modules their cache, and route DeepSpeed's iter_params through `_params` (once per process)."""
    from deepspeed.runtime.zero import parameter_offload, partitioned_param_coordinator as coordinator

    for module in model.modules():
        setattr(module, LISTS, {})
    if getattr(coordinator.iter_params, LISTS, False):
        return
    stock = coordinator.iter_params

    def iter_params(module, recurse=False):
        return _params(module, recurse, stock)

    setattr(iter_params, LISTS, True)
    coordinator.iter_params = iter_params  # the coordinator's fetch and release
    parameter_offload.iter_params = iter_params  # partition_all_parameters after the step (imported by name there)


def _params(module, recurse: bool, stock):
    lists = getattr(module, LISTS, None)
    if lists is None or not switches.on(NAME):
        return stock(module, recurse)
    own = lists.get(recurse)
    if own is None:
        own = lists[recurse] = tuple(p for _, p in module.named_parameters(recurse=recurse))
    if trace.enabled():
        trace.note("zero3-param-list")
    return itertools.chain(own, (p for _, p in module.ds_external_parameters()))
