"""The decision tree branch by branch, on hardware given by flags (planning for a cluster not here)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from shardlab.core.config import RunConfig
from shardlab.core.errors import UserError
from shardlab.core.hardware import GiB
from shardlab.recipes.plan import plan as resolve_plan
from shardlab.recipes.resolve import NothingFits


def _config(model, gpus, gib, nodes=1, cpu_gib=1024, **cfg) -> RunConfig:
    return RunConfig(model=model, accelerator="gpu", num_nodes=nodes, precision="bf16-mixed", gpus=gpus,
                     gpu_memory_gib=gib, cpu_memory_gib=cpu_gib, micro_batch_size=cfg.pop("micro_batch_size", 1),
                     seq_len=cfg.pop("seq_len", 2048), **cfg)


def plan(*args, **cfg):
    r = resolve_plan(_config(*args, **cfg))  # the resolved run: the selector's choice, reasons, candidates, the batch
    return SimpleNamespace(choice=r.config.strategy, reasons=r.auto["reasons"], grad_accum=r.config.grad_accum,
                           checkpointing=r.config.activation_checkpointing, decisions=r.decisions,
                           rows={row["name"]: SimpleNamespace(**row) for row in r.candidates})


def nothing_fits(*args, **cfg) -> NothingFits:
    with pytest.raises(NothingFits) as e:
        resolve_plan(_config(*args, **cfg))
    return e.value


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
    assert plan("llama-13b", 4, 80, memory_headroom=0).choice == "zero3"


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
    assert d.rows[d.choice].fits and not d.rows["zero3"].fits
    assert any("no strategy without offload fits" in r for r in d.reasons)


def test_a_choice_that_does_not_fit_moves_down_in_memory_order():
    # 13B on one node of 8 GPUs, no headroom: the tree says ZeRO-3; GPUs just below its estimate but above FSDP's
    # make it miss, and FSDP fits and comes before every offload preset in memory order.
    rows = plan("llama-13b", 8, 80, memory_headroom=0).rows
    z3, fsdp = rows["zero3"].gpu_bytes / GiB, rows["fsdp"].gpu_bytes / GiB
    assert fsdp < z3
    d = plan("llama-13b", 8, (z3 + fsdp) / 2, memory_headroom=0)
    assert d.choice == "fsdp" and any("moved to fsdp" in r for r in d.reasons)


# Activation checkpointing against offload (issue 18): when not given, on only where it avoids offload.

def test_70b_on_4_nodes_of_8x80_is_zero3_with_checkpointing_not_offload():
    # eager layers: compiled ones (fsdp's GPU default with torch kernels) keep less, and fsdp then fits micro-batch 1
    # without checkpointing (70.1 of 72 GiB)
    d = plan("llama-70b", 8, 80, nodes=4, cpu_gib=2048, compile=False)
    assert d.choice == "zero3" and d.checkpointing is True
    assert not d.rows["zero3"].gpu_bytes > 0.9 * 80 * GiB
    why = d.reasons[0]
    assert why.startswith("activation checkpointing on: no strategy without CPU offload fits") and "14%" in why
    assert "1.65-4.3x" in why  # the measured offload cost it is weighed against


@pytest.mark.parametrize("given, model, gpus, nodes, expect", [
    # the user's word stands, in both directions, whatever the selector would prefer
    (False, "llama-70b", 8, 4, "fsdp"),  # no checkpointing: fsdp's compiled layers fit micro-batch 1 (70.1 of 72 GiB)
    (True, "llama-7b", 8, 1, "fsdp"),  # checkpointing although fsdp fits without it
    (None, "llama-7b", 8, 1, "fsdp"),  # not given, not needed: off, and said so
])
def test_the_users_checkpointing_is_never_overridden(given, model, gpus, nodes, expect):
    d = plan(model, gpus, 80, nodes=nodes, cpu_gib=2048, activation_checkpointing=given)
    assert d.choice == expect and d.checkpointing is bool(given)
    assert not any(r.startswith("activation checkpointing on") for r in d.reasons)
    assert any(x.startswith("activation checkpointing off") for x in d.decisions) is (given is None)


# Headroom: "fits" leaves --memory-headroom (default 10%) of each memory free.

def test_13b_on_4x80_leaves_headroom():
    d = plan("llama-13b", 4, 80)
    assert d.choice != "zero2" and d.rows[d.choice].gpu_bytes <= 0.9 * 80 * GiB
    assert all(r.fits is (r.gpu_bytes <= 0.9 * 80 * GiB and r.cpu_bytes <= 0.9 * 1024 * GiB) for r in d.rows.values())


@pytest.mark.parametrize("headroom, zero2_chosen", [(0.1, False), (0.05, False), (0, True)])
def test_a_strategy_at_99_percent_fits_only_without_headroom(headroom, zero2_chosen):
    zero2 = plan("llama-13b", 4, 141).rows["zero2"].gpu_bytes
    gib = zero2 / 0.99 / GiB  # GPUs on which zero2's estimate is 99% of the memory
    d = plan("llama-13b", 4, gib, memory_headroom=headroom)
    assert (d.choice == "zero2") is zero2_chosen and d.rows["zero2"].fits is zero2_chosen
    assert d.rows[d.choice].gpu_bytes <= (1 - headroom) * gib * GiB


def test_headroom_out_of_range_names_the_flag():
    from shardlab.core.config import load_config

    for bad in (-0.1, 0.5, 0.9):
        with pytest.raises(UserError, match=r"--memory-headroom: must be a fraction in \[0, 0.5\)"):
            load_config(None, {"memory_headroom": bad})


# Nothing fits: the closest by the memory that binds, and only the fixes that reduce it.

def test_nothing_fits_cpu_bound_names_the_smallest_cpu_need_among_those_that_fit_the_gpus():
    e = nothing_fits("llama-70b", 8, 80, cpu_gib=256)
    d = e.decision
    on_gpus = [r for r in e.rows if r["gpu_bytes"] <= 0.9 * 80 * GiB]
    assert d.binding == "cpu" and on_gpus and not any(r["fits"] for r in e.rows)
    assert d.closest == min(on_gpus, key=lambda r: r["cpu_bytes"])["name"]
    assert d.fixes[0].startswith("nodes with more CPU memory") and any(f.startswith("more nodes: ") for f in d.fixes)
    assert not any("--micro-batch-size" in f or "--activation-checkpointing" in f or "--offload" in f for f in d.fixes)
    assert isinstance(e, UserError) and "\n" not in str(e)  # `recipe run --strategy auto`: one line, exit 2
    assert str(e).startswith("no strategy fits on ") and f"the closest, {d.closest}" in str(e)


@pytest.mark.parametrize("flags, fix", [
    (dict(micro_batch_size=4), "a smaller --micro-batch-size (now 4"),
    (dict(activation_checkpointing=False), "--activation-checkpointing, which you turned off"),
])
def test_nothing_fits_gpu_bound_names_the_smallest_gpu_need(flags, fix):
    e = nothing_fits("llama-70b", 1, 4, cpu_gib=8192, **flags)
    d = e.decision
    assert d.binding == "gpu" and not any(r["gpu_bytes"] <= 0.9 * 4 * GiB for r in e.rows)
    assert d.closest == min(e.rows, key=lambda r: r["gpu_bytes"])["name"]
    assert any(f.startswith(fix) for f in d.fixes)
    assert not any("CPU memory" in f for f in d.fixes)


def test_nothing_fits_without_checkpointing_given_shows_the_table_with_it():
    e = nothing_fits("llama-70b", 1, 16, cpu_gib=64)
    assert e.work.activation_checkpointing and "activation checkpointing on in this table" in e.decision.reasons[0]
    assert not any("--activation-checkpointing" in f for f in e.decision.fixes)  # already tried


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


@pytest.mark.parametrize("model,gib,flags,ratio,said", [
    ("llama-7b", 80, {}, 0.75, "reasons"),  # the selector chose offload: the smallest CPU share that fits, in its reasons
    ("llama-3.2-3b", 40, {}, 0.75, "reasons"),  # Llama 3's shape: tied, 128k vocabulary
    ("llama-7b", 40, {}, None, None),  # no smaller share fits: the whole optimizer on the CPU
    ("llama-7b", 80, {"offload": "optimizer"}, None, "decisions"),  # offload asked for: all of it; the share a hint
    ("llama-7b", 80, {"offload_ratio": 1.0}, 1.0, None),  # the user's share stands
])
def test_auto_offload_takes_the_smallest_cpu_share_that_fits(model, gib, flags, ratio, said):
    """One GPU where nothing without offload fits, so `auto` offloads the optimizer; where the estimate fits with part
    of it on the GPU, the run takes the smallest CPU share of 0.1 / 0.25 / 0.5 / 0.75 that fits (faster: it steps on
    the GPU), unless the user asked for offload or for a share."""
    mb = 4 if model == "llama-3.2-3b" else 8
    r = resolve_plan(_config(model, 1, gib, cpu_gib=512, micro_batch_size=mb, activation_checkpointing=True, **flags))
    assert r.config.strategy == "zero3_offload" and r.config.offload_ratio == ratio
    chosen = [x for x in r.auto["reasons"] if x.startswith("--offload-ratio")]
    hints = [x for x in r.decisions if "--offload-ratio" in x and "would also fit" in x]
    assert (len(chosen), len(hints)) == (said == "reasons", said == "decisions"), (chosen, hints)
    if said == "reasons":
        assert chosen[0].startswith("--offload-ratio 0.75: the smallest CPU share of the optimizer that fits") \
            and "--offload-ratio 1 keeps all of it on the CPU" in chosen[0]
        row = next(c for c in r.candidates if c["name"] == "zero3_offload")
        assert row["fits"] and row["gpu_bytes"] == r.estimate["gpu_bytes"] < 0.95 * gib * GiB  # the estimate at 0.75
        assert r.estimate["gpu_bytes"] > resolve_plan(r.config.model_copy(update={"offload_ratio": 1.0})).estimate["gpu_bytes"]
    if said == "decisions":
        assert hints[0].startswith("--offload-ratio 0.75 would also fit")


def test_a_preset_takes_a_branch_through_its_role_not_its_name():
    from shardlab.core import memory, registry, selector
    from shardlab.core.hardware import Hardware
    from shardlab.core.strategy import Preset
    from shardlab.recipes.model import model_config

    fsdp = registry.get("fsdp")
    mine = Preset(**{**fsdp.__dict__, "name": "my_fsdp", "source": "plugin:mine"})
    shape = memory.shape_of(model_config("llama-7b"))
    work = memory.Workload(micro_batch_size=1, seq_len=2048, activation_checkpointing=False, precision="bf16-mixed",
                           gpus_per_node=8, num_nodes=1)
    hw = Hardware(accelerator="gpu", gpus_per_node=8, gpu_memory_bytes=80 * GiB, bf16=True, num_nodes=1,
                  cpu_memory_bytes=1024 * GiB)
    d = selector.choose(selector.Budget(hw, 0.1), shape, work, None, {"my_fsdp": (mine, mine.build().estimate(shape, work))})
    assert d.choice == "my_fsdp" and "no offload needed: my_fsdp" in d.reasons[0]


def test_the_measured_7b_points_on_one_h200_with_its_125_gib_host():
    # benchmarks/results/2026-12-03-memory-h200.md: on this machine zero3_offload ran (123.2 GiB CPU measured) and
    # zero3_offload_all was killed for host memory; fsdp with checkpointing ran at 102-103 GiB
    d = plan("llama-2-7b", 1, 140, cpu_gib=125, micro_batch_size=2, activation_checkpointing=True)
    assert d.choice == "fsdp" and d.rows["zero3_offload"].fits and not d.rows["zero3_offload_all"].fits
    d = plan("llama-2-7b", 1, 140, cpu_gib=125, micro_batch_size=2, activation_checkpointing=True, offload="all")
    assert d.choice != "zero3_offload_all" and "151.5 GiB CPU per node, more than fits" in d.reasons[1], d.reasons
