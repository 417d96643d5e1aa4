"""The decision tree branch by branch, on hardware given by flags (planning for a cluster not here)."""
from __future__ import annotations

import pytest

from shardlab.core.config import RunConfig
from shardlab.core.errors import UserError
from types import SimpleNamespace

from shardlab.recipes.plan import plan as resolve_plan


def plan(model, gpus, gib, nodes=1, cpu_gib=1024, **cfg):
    c = RunConfig(model=model, accelerator="gpu", num_nodes=nodes, precision="bf16-mixed", gpus=gpus,
                  gpu_memory_gib=gib, cpu_memory_gib=cpu_gib, micro_batch_size=cfg.pop("micro_batch_size", 1),
                  seq_len=cfg.pop("seq_len", 2048), **cfg)
    r = resolve_plan(c)  # the resolved run: the selector's choice, reasons, candidates, the batch it took
    return SimpleNamespace(choice=r.config.strategy, reasons=r.auto["reasons"], grad_accum=r.config.grad_accum,
                           rows=[SimpleNamespace(**row) for row in r.candidates])


def test_7b_no_offload_on_8_gpus_is_fsdp():
    d = plan("llama-7b", 8, 80)
    assert d.choice == "fsdp" and "< 10B" in d.reasons[0]


def test_13b_on_one_node_of_8_is_zero3():
    d = plan("llama-13b", 8, 80)
    assert d.choice == "zero3" and "8 GPUs on the node" in d.reasons[0]


def test_13b_on_4_gpus_where_zero2_fits_is_zero2():
    d = plan("llama-13b", 4, 141)
    assert d.choice == "zero2" and "and zero2 fits" in d.reasons[0]


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
    assert d.grad_accum == 2 and any("--grad-accum 2 kept as given; 8 would" in r for r in d.reasons)


def test_no_offload_no_batch_change():
    d = plan("llama-7b", 8, 80, micro_batch_size=8, activation_checkpointing=True)
    assert d.choice == "fsdp" and d.grad_accum == 1


def test_auto_run_takes_the_picked_batch_unless_given():
    c = RunConfig(strategy="auto", model="llama-7b", accelerator="gpu", precision="bf16-mixed", gpus=8, gpu_memory_gib=80,
                  cpu_memory_gib=1024, offload="optimizer", micro_batch_size=8, seq_len=2048, activation_checkpointing=True)
    r = resolve_plan(c)
    assert r.config.grad_accum == 8 and r.config.strategy == "zero3_offload" and r.config.offload is None
    assert resolve_plan(c.model_copy(update={"grad_accum": 3})).config.grad_accum == 3


def test_a_preset_takes_a_branch_through_its_role_not_its_name():
    from shardlab.core import memory, registry, selector
    from shardlab.core.hardware import GiB, Hardware
    from shardlab.core.strategy import Preset
    from shardlab.recipes.model import model_config

    fsdp = registry.get("fsdp")
    mine = Preset(**{**fsdp.__dict__, "name": "my_fsdp", "source": "plugin:mine"})
    shape = memory.shape_of(model_config("llama-7b"))
    work = memory.Workload(micro_batch_size=1, seq_len=2048, activation_checkpointing=False, precision="bf16-mixed",
                           gpus_per_node=8, num_nodes=1)
    hw = Hardware(accelerator="gpu", gpus_per_node=8, gpu_memory_bytes=80 * GiB, bf16=True, num_nodes=1,
                  cpu_memory_bytes=1024 * GiB)
    d = selector.choose(hw, shape, work, None, {"my_fsdp": (mine, mine.build().estimate(shape, work))})
    assert d.choice == "my_fsdp" and "no offload needed: my_fsdp" in d.reasons[0]
