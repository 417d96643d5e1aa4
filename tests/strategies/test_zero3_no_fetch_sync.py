"""zero3's `no-fetch-sync` lever (strategies/deepspeed_fetch.py, offered) trains the model DeepSpeed's one-rank fetch trains.

One rank on CPU takes DeepSpeed's one-rank fetch (no gather) as one GPU does: the Llama 3 shape (tests/conftest.py
LLAMA3, tied embeddings, validation and a checkpoint on the way) in bf16-mixed with clipping, zero3's defaults with and
without the lever. The lever changes which handle marks a fetched parameter available, not its data: the losses and
validation losses must be equal to the bit, and SHARDLAB_TRACE counts the lever's fetches. On 2 ranks DeepSpeed gathers
for real and the lever does nothing: the same losses as test_parity's zero3 run, and no fetch of its own. Its refusal
under another DeepSpeed is checked in-process.
"""
from __future__ import annotations

from collections import Counter

import pytest

from tests.conftest import LLAMA3
from tests.strategies.test_fsdp_direct_cast import ONE_RANK

DEFAULTS = "lean-config,fused-step"  # zero3's defaults when this was written (late-wait joined them later)


def test_no_fetch_sync_trains_what_deepspeeds_one_rank_fetch_trains(train, tmp_path):
    trace = tmp_path / "trace.txt"
    # the two one-rank runs at once (train.many, tests/conftest.py), the lever's under SHARDLAB_TRACE
    lever, stock = train.many([("zero3", (*ONE_RANK, "--experiments", f"{DEFAULTS},no-fetch-sync"),
                                {"SHARDLAB_TRACE": str(trace)}),
                               ("zero3", (*ONE_RANK, "--experiments", DEFAULTS), None)])
    assert lever["config"]["experiments"] == ["lean-config", "fused-step", "no-fetch-sync"]
    assert lever["world_size"] == 1 and stock["losses"][-1] < stock["losses"][0]
    assert lever["losses"] == stock["losses"]
    assert [v["loss"] for v in lever["val_losses"]] == [v["loss"] for v in stock["val_losses"]]
    events = Counter(line.split()[0] for line in trace.read_text().splitlines())
    # the tiny model keeps most parameters gathered (DeepSpeed's persistence threshold); the rest are fetched each step
    assert events["zero3-fetch-no-sync"] >= len(stock["losses"]), events


def test_no_fetch_sync_leaves_a_two_rank_gather_to_deepspeed(train, tmp_path):
    trace = tmp_path / "trace.txt"
    lever = train("zero3", *LLAMA3, "--experiments", f"{DEFAULTS},no-fetch-sync", env={"SHARDLAB_TRACE": str(trace)})
    assert lever["world_size"] == 2 and lever["losses"] == train("zero3", *LLAMA3)["losses"]  # zero3's defaults
    assert "zero3-fetch-no-sync" not in trace.read_text()


def test_no_fetch_sync_is_refused_under_another_deepspeed(monkeypatch):
    import importlib.metadata

    from shardlab.core import registry
    from shardlab.core.errors import UserError
    from shardlab.core.strategy import RunContext

    zero3 = registry.get("zero3").build()
    assert "no-fetch-sync" in zero3.capabilities.experiments and "no-fetch-sync" not in zero3.default_experiments("bf16-mixed")
    ctx = RunContext(accelerator="gpu", devices=1, num_nodes=1, precision="bf16-mixed", grad_accum=1, grad_clip=1.0,
                     micro_batch_size=8, experiments=("no-fetch-sync",))
    zero3.check(ctx)
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.20.1")
    with pytest.raises(UserError, match=r"--experiments no-fetch-sync: written against DeepSpeed 0\.19\.8"):
        zero3.check(ctx)
