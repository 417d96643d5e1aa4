"""zero3_offload's `gpu-cast` lever (strategies/deepspeed_offload_cast.py) trains the model DeepSpeed's own copy trains,
and so does its `lean-config` (zero3's, strategies/deepspeed_experiments.py), run with it.

On CPU processes both ends of the copy are in CPU memory, so the chunked copy runs in order: the Llama 3 shape's run
(tests/conftest.py LLAMA3, 2 CPU ranks, the run test_parity.py makes without the lever) must give DeepSpeed's losses to
the bit, and SHARDLAB_TRACE counts the replaced copy on every rank and step. The GPU's non-blocking path is measured on
the GPU machine (benchmarks/results). The ds_config's sub-groups and the version refusal are checked in-process.
"""
from __future__ import annotations

from collections import Counter

import pytest

from tests.conftest import LLAMA3


def test_gpu_cast_trains_what_deepspeeds_copy_trains(train, tmp_path, monkeypatch):
    trace = tmp_path / "trace.txt"
    monkeypatch.setenv("SHARDLAB_TRACE", str(trace))
    # with lean-config too, in the same run: neither changes the arithmetic
    cast = train("zero3_offload", "--experiments", "gpu-cast,lean-config", *LLAMA3)
    monkeypatch.delenv("SHARDLAB_TRACE")
    stock = train("zero3_offload", *LLAMA3)
    assert set(cast["config"]["experiments"]) == {"gpu-cast", "lean-config"} and stock["config"]["experiments"] == []
    assert stock["losses"][-1] < stock["losses"][0]
    assert cast["losses"] == stock["losses"]
    assert [v["loss"] for v in cast["val_losses"]] == [v["loss"] for v in stock["val_losses"]]
    events = Counter(line.split()[0] for line in trace.read_text().splitlines())
    assert events["zero3-offload-gpu-cast"] == 2 * len(stock["losses"]), events  # one sub-group a rank, every step


def test_gpu_cast_sets_sub_groups_unless_the_ratio_has_its_own():
    from shardlab.core import registry
    from shardlab.core.strategy import RunContext
    from shardlab.strategies.deepspeed_experiments import GPU_CAST_SUB_GROUP_SIZE
    from shardlab.strategies.deepspeed_offload import OFFLOAD_RATIO_SUB_GROUP_SIZE

    ctx = RunContext(accelerator="gpu", devices=1, num_nodes=1, precision="bf16-mixed", grad_accum=1, grad_clip=1.0,
                     micro_batch_size=8, experiments=("gpu-cast",))
    preset = registry.get("zero3_offload").build()
    assert preset.ds_config(ctx)["zero_optimization"]["sub_group_size"] == GPU_CAST_SUB_GROUP_SIZE
    ratio = preset.ds_config(RunContext(**{**ctx.__dict__, "offload_ratio": 0.5}))["zero_optimization"]
    assert ratio["sub_group_size"] == OFFLOAD_RATIO_SUB_GROUP_SIZE
    stock = preset.ds_config(RunContext(**{**ctx.__dict__, "experiments": ()}))["zero_optimization"]
    assert "sub_group_size" not in stock


def test_gpu_cast_is_refused_under_another_deepspeed_and_offered_by_zero3_offload_only(monkeypatch):
    import importlib.metadata

    from shardlab.core import registry
    from shardlab.core.errors import UserError
    from shardlab.core.strategy import RunContext

    assert "gpu-cast" in registry.get("zero3_offload").capabilities.experiments
    assert "gpu-cast" not in registry.get("zero3").capabilities.experiments
    offload = registry.get("zero3_offload").build()

    def check(precision: str) -> None:
        offload.check(RunContext(accelerator="gpu", devices=1, num_nodes=1, precision=precision, grad_accum=1,
                                 grad_clip=1.0, micro_batch_size=8, experiments=("gpu-cast",)))

    check("16-mixed")  # no loss-scale arithmetic of its own
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.20.1")
    with pytest.raises(UserError, match=r"^--experiments gpu-cast: written against DeepSpeed 0\.19\.8"):
        check("bf16-mixed")
