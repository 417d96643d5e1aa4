"""zero3's `no-nvtx` lever (strategies/deepspeed_nvtx.py, offered): DeepSpeed's NVTX ranges off.

Its values are checked where it is switched off and on within one run (tests/recipes/test_lever_ab.py: the same losses
as zero3's defaults to the bit, and DeepSpeed pushing ranges only on the steps the lever was off); here, in-process,
that it is offered but not a default, and refused under a DeepSpeed whose flag was not read.
"""
from __future__ import annotations

import pytest


def test_no_nvtx_is_offered_and_refused_under_another_deepspeed(monkeypatch):
    import importlib.metadata

    from shardlab.core import registry
    from shardlab.core.errors import UserError
    from shardlab.core.strategy import RunContext

    zero3 = registry.get("zero3").build()
    assert "no-nvtx" in zero3.capabilities.experiments and "no-nvtx" not in zero3.default_experiments("bf16-mixed")
    assert "no-nvtx" in zero3.capabilities.switchable
    ctx = RunContext(accelerator="gpu", devices=1, num_nodes=1, precision="bf16-mixed", grad_accum=1, grad_clip=1.0,
                     micro_batch_size=8, experiments=("no-nvtx",))
    zero3.check(ctx)
    from deepspeed.utils import nvtx  # the flag the lever sets, as 0.19.8 has it

    assert nvtx.enable_nvtx is True
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.20.1")
    with pytest.raises(UserError, match=r"--experiments no-nvtx: written against DeepSpeed 0\.19\.8"):
        zero3.check(ctx)
