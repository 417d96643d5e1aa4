"""fsdp's `direct-cast` lever (strategies/fsdp_direct_cast.py, on by default) trains the model torch's one-rank path trains.

One rank on CPU takes the same one-rank branch of FSDP2 as one GPU: the Llama 3 shape (tests/conftest.py LLAMA3, tied
embeddings, validation and a checkpoint on the way) in bf16-mixed with clipping, so that every weight is cast from its
fp32 shard and every gradient reduced: the lever's losses must be torch's to the bit, and SHARDLAB_TRACE counts the
replaced unshard (before each layer's forward and backward) and reduce (after its backward) on every step. The version
refusal and the defaults are checked in-process.
"""
from __future__ import annotations

from collections import Counter

import pytest

from shardlab.recipes.model import SHAPES
from tests.conftest import LLAMA3

ONE_RANK = (*LLAMA3, "--devices", "1", "--precision", "bf16-mixed", "--grad-clip", "0.05")


def test_direct_cast_trains_what_torchs_one_rank_path_trains(train, tmp_path):
    trace = tmp_path / "trace.txt"
    # one-rank runs at once (train.many, tests/conftest.py), the lever's under SHARDLAB_TRACE; the stock one is
    # test_fsdp_clip_in_adamw.py's too
    cast, stock = train.many([("fsdp", (*ONE_RANK, "--experiments", "direct-cast"), {"SHARDLAB_TRACE": str(trace)}),
                              ("fsdp", (*ONE_RANK, "--experiments", "none"), None)])
    assert cast["config"]["experiments"] == ["direct-cast"] and stock["config"]["experiments"] == []
    assert cast["world_size"] == 1 and stock["losses"][-1] < stock["losses"][0]
    assert cast["losses"] == stock["losses"]
    assert [v["loss"] for v in cast["val_losses"]] == [v["loss"] for v in stock["val_losses"]]
    events = Counter(line.split()[0] for line in trace.read_text().splitlines())
    groups = SHAPES["tiny-llama3"]["num_hidden_layers"] + 1  # each decoder layer, and the root (embeddings, norm)
    steps = len(stock["losses"])
    assert events["fsdp-reduce-in-place"] == groups * steps, events
    # the root stays gathered from its forward through its backward; each layer is gathered again for its backward;
    # validation's forwards (no backward) gather each layer once more
    assert events["fsdp-direct-cast"] >= (2 * groups - 1) * steps, events


def test_direct_cast_is_refused_and_left_out_of_the_defaults_under_an_unread_torch(monkeypatch):
    from shardlab.core import registry
    from shardlab.core.errors import UserError
    from shardlab.core.strategy import RunContext
    from shardlab.strategies import fsdp_direct_cast

    fsdp = registry.get("fsdp").build()
    assert fsdp.default_experiments("bf16-mixed") == ("direct-cast", "clip-in-adamw", "direct-grads")
    monkeypatch.setattr(fsdp_direct_cast, "version", lambda name: "2.99.0+cu130")
    assert fsdp.default_experiments("bf16-mixed") == ("clip-in-adamw",)
    ctx = RunContext(accelerator="gpu", devices=1, num_nodes=1, precision="bf16-mixed", grad_accum=1, grad_clip=1.0,
                     micro_batch_size=8, experiments=("direct-cast",))
    with pytest.raises(UserError, match="direct-cast: written against the private FSDP2 code of torch 2.11, 2.12, "
                                        "2.13, and torch 2.99.0"):
        fsdp.check(ctx)
