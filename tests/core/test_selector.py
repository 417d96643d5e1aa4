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


# The batch for CPU offload: enough micro-batches for 131,072 tokens per GPU per optimizer step (measured).

def test_offload_choice_picks_the_measured_batch():
    d = plan("llama-7b", 1, 80, cpu_gib=512, micro_batch_size=8, activation_checkpointing=True)
    assert d.choice.startswith("zero3_offload") and d.grad_accum == 8
    assert any("gradient accumulation 8: 131,072 tokens per GPU" in r for r in d.reasons)
    assert plan("llama-7b", 8, 80, offload="optimizer", micro_batch_size=16, activation_checkpointing=True).grad_accum == 4


def test_offload_batch_is_capped_and_says_so():
    d = plan("llama-7b", 8, 80, offload="optimizer", micro_batch_size=1, seq_len=1024)
    assert d.grad_accum == 16 and any("capped at 16" in r for r in d.reasons)


def test_the_users_grad_accum_wins_with_a_hint():
    d = plan("llama-7b", 8, 80, offload="optimizer", micro_batch_size=8, activation_checkpointing=True, grad_accum=2)
    assert d.grad_accum is None and any("--grad-accum 2 kept as given; 8 would" in r for r in d.reasons)


def test_no_offload_no_batch_change():
    d = plan("llama-7b", 8, 80, micro_batch_size=8, activation_checkpointing=True)
    assert d.choice == "fsdp" and d.grad_accum is None


def test_auto_run_takes_the_picked_batch_unless_given():
    from shardlab.recipes.plan import apply_decision

    c = RunConfig(strategy="auto", model="llama-7b", accelerator="gpu", precision="bf16-mixed", gpus=8, gpu_memory_gib=80,
                  cpu_memory_gib=1024, offload="optimizer", micro_batch_size=8, seq_len=2048, activation_checkpointing=True)
    d = make_plan(c)[2]
    assert apply_decision(c, d).grad_accum == 8 and apply_decision(c, d).strategy == "zero3_offload"
    assert apply_decision(c.model_copy(update={"grad_accum": 3}), d).grad_accum == 3
