"""zero3's host-time levers, both offered, neither a default (late-wait is one, test_zero3_late_wait.py):
`param-lists` (strategies/deepspeed_param_lists.py, each module's parameter list built once) and `no-nvtx`
(strategies/deepspeed_nvtx.py, DeepSpeed's NVTX ranges off).

Their values are checked where each is switched off and on within one run (tests/recipes/test_lever_ab.py: the same
losses as zero3's defaults to the bit, and each acting only on the steps it was on); here, in-process, that they are
offered and switchable but not defaults, and refused under a DeepSpeed whose code was not read for them; and on 2
ranks, param-lists alone against test_parity's zero3 run, and zero3's four host levers together (these two,
no-fetch-sync and late-wait) under activation checkpointing and accumulation.
"""
from __future__ import annotations

import pytest

from tests.conftest import CHAT_DATA, LLAMA3


@pytest.mark.parametrize("lever", ["param-lists", "no-nvtx"])
def test_offered_switchable_and_refused_under_another_deepspeed(monkeypatch, lever):
    import importlib.metadata

    from shardlab.core import registry
    from shardlab.core.errors import UserError
    from shardlab.core.strategy import RunContext

    zero3 = registry.get("zero3").build()
    assert lever in zero3.capabilities.experiments and lever not in zero3.default_experiments("bf16-mixed")
    assert lever in zero3.capabilities.switchable
    ctx = RunContext(accelerator="gpu", devices=1, num_nodes=1, precision="bf16-mixed", grad_accum=1, grad_clip=1.0,
                     micro_batch_size=8, experiments=(lever,))
    zero3.check(ctx)
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.20.1")
    with pytest.raises(UserError, match=rf"--experiments {lever}: written against DeepSpeed 0\.19\.8"):
        zero3.check(ctx)


def test_what_the_levers_replace_is_there():
    """The names they set or replace, as DeepSpeed 0.19.8 has them."""
    from deepspeed.runtime.zero import parameter_offload, partitioned_param_coordinator
    from deepspeed.utils import nvtx

    assert nvtx.enable_nvtx is True and callable(nvtx._range_push)
    assert parameter_offload.iter_params is partitioned_param_coordinator.iter_params


def test_param_lists_on_two_ranks_gather_and_release_what_deepspeed_does(train, tmp_path):
    """On 2 ranks DeepSpeed really gathers each module's parameters from the list it is given: with the lists built
    once, test_parity's zero3 run (the Llama 3 shape, tied embeddings, validation and a checkpoint) to the bit."""
    trace = tmp_path / "trace.txt"
    lever = train("zero3", *LLAMA3, "--experiments",
                  "lean-config,fused-step,late-wait,sub-groups,direct-grads,param-lists", env={"SHARDLAB_TRACE": str(trace)})
    stock = train("zero3", *LLAMA3)  # zero3's defaults
    assert lever["world_size"] == 2 and lever["losses"] == stock["losses"]
    assert [v["loss"] for v in lever["val_losses"]] == [v["loss"] for v in stock["val_losses"]]
    assert "zero3-param-list" in trace.read_text()


def test_the_host_levers_together_under_checkpointing_and_accumulation(train):
    """What a default of them would run: param-lists, no-nvtx, no-fetch-sync and late-wait on 2 ranks with activation
    checkpointing (each layer's forward again in backward, fetching its parameters once more) and accumulation 2,
    against zero3 without them (lean-config and fused-step): the same losses to the bit."""
    flags = ("--model", "tiny-llama3", "--max-steps", "4", "--micro-batch-size", "2", "--seq-len", "64", "--data",
             str(CHAT_DATA), "--precision", "bf16-mixed", "--grad-clip", "0.05", "--activation-checkpointing",
             "--grad-accum", "2", "--no-export")
    levers = train("zero3", *flags, "--experiments",
                   "lean-config,fused-step,param-lists,no-nvtx,no-fetch-sync,late-wait")
    stock = train("zero3", *flags, "--experiments", "lean-config,fused-step")
    assert levers["world_size"] == 2 and levers["losses"] == stock["losses"] and stock["losses"][-1] < stock["losses"][0]
