"""The decision tree branch by branch, on hardware given by flags (planning for a cluster not here)."""
from __future__ import annotations

import pytest

from shardlab.core.config import RunConfig
from shardlab.core.errors import UserError
from shardlab.recipes.plan import make_plan


def plan(model, gpus, gib, nodes=1, cpu_gib=1024, **cfg):
    c = RunConfig(model=model, accelerator="gpu", num_nodes=nodes, precision="bf16-mixed", gpus=gpus,
                  gpu_memory_gib=gib, cpu_memory_gib=cpu_gib, micro_batch_size=cfg.pop("micro_batch_size", 1),
                  seq_len=cfg.pop("seq_len", 2048), **cfg)
    return make_plan(c)[2]


def test_7b_no_offload_on_8_gpus_is_fsdp():
    d = plan("llama-7b", 8, 80)
    assert d.choice == "fsdp" and "< 10B" in d.reasons[0]


def test_13b_on_one_node_of_8_is_zero3():
    d = plan("llama-13b", 8, 80)
    assert d.choice == "zero3" and "8 GPUs on the node" in d.reasons[0]


def test_13b_on_4_gpus_where_zero2_fits_is_zero2():
    d = plan("llama-13b", 4, 141)
    assert d.choice == "zero2" and "ZeRO-2 fits" in d.reasons[0]


def test_13b_on_4_small_gpus_where_zero2_does_not_fit_is_zero3():
    assert plan("llama-13b", 4, 80).choice == "zero3"


def test_13b_on_two_nodes_is_zero3():
    d = plan("llama-13b", 4, 141, nodes=2)
    assert d.choice == "zero3" and "several nodes" in d.reasons[0]


def test_offload_asked_for_is_zero3_offload():
    assert plan("llama-7b", 8, 80, offload="optimizer").choice == "zero3_offload"
    assert plan("llama-7b", 8, 80, offload="all").choice == "zero3_offload_all"


def test_nothing_fits_without_offload_but_cpu_holds_it():
    d = plan("llama-7b", 1, 24, cpu_gib=512)
    assert d.choice.startswith("zero3_offload") and "no strategy without offload fits" in d.reasons[0]


def test_70b_on_8x80_the_estimate_decides():
    d = plan("llama-70b", 8, 80, cpu_gib=2048)
    rows = {r.name: r for r in d.rows}
    assert rows[d.choice].fits and not rows["zero3"].fits
    assert any("moved to" in r or "does not fit" in r for r in d.reasons)


def test_a_choice_that_does_not_fit_moves_down_in_memory_order():
    # 13B on one node of 8 GPUs of 46 GiB: the tree says ZeRO-3 (47.6 GiB), which misses; FSDP (44.1 GiB)
    # fits and comes before every offload preset in memory order.
    d = plan("llama-13b", 8, 46)
    assert d.choice == "fsdp" and any("moved to fsdp" in r for r in d.reasons)


def test_nothing_fits_is_an_error_with_the_smallest_need_and_fixes():
    with pytest.raises(UserError) as e:
        plan("llama-70b", 1, 16, cpu_gib=64, micro_batch_size=4)
    msg = str(e.value)
    assert "no strategy fits: the smallest" in msg and "--activation-checkpointing" in msg and "--micro-batch-size" in msg
