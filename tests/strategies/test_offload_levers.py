"""zero3_offload's levers train the model DeepSpeed's own ZeRO-3 offload trains: `gpu-cast`
(strategies/deepspeed_offload_cast.py), `gpu-grads` (strategies/deepspeed_offload_grads.py), zero3's `lean-config` and
`overlap-comm` (strategies/deepspeed_experiments.py), all four in one run; `gpu-accum`
(strategies/deepspeed_offload_accum.py) in a run of its own, its buffer's memory in the estimate in-process.

On CPU processes both ends of gpu-cast's copy are in CPU memory, so its chunked copy runs in order; and every sub-group
is stepped on the CPU, where its gradients are, so every parameter accumulates in its sub-group's fp32 gradient under
gpu-grads. The Llama 3 shape's run (tests/conftest.py LLAMA3, 2 CPU ranks, fp32) with accumulation 2, so that
gpu-grads' first copy, its add and the boundary's copy onto itself all run, must give DeepSpeed's losses to the bit.
SHARDLAB_TRACE counts gpu-cast's copy on every rank and step, and the parameters that took gpu-grads on each rank. The
GPU's non-blocking paths, and overlap-comm's stream (CPU processes have none: DeepSpeed runs it in order there), are
measured on the GPU machine (benchmarks/results). The ds_config's levers and the refusals are checked in-process.
"""
from __future__ import annotations

from collections import Counter

import pytest

from tests.conftest import LLAMA3

ACCUMULATED = (*LLAMA3, "--grad-accum", "2")


def test_the_offload_levers_train_what_deepspeed_trains(train, tmp_path):
    trace, accum_trace = tmp_path / "trace.txt", tmp_path / "accum.txt"
    # lean-config and overlap-comm too, in the same run: none of the four changes the arithmetic in fp32. gpu-accum
    # in a run of its own: where gpu-grads runs (every parameter on CPU processes) it has nothing left to move
    levers, accum, stock = train.many([
        ("zero3_offload", ("--experiments", "gpu-cast,gpu-grads,lean-config,overlap-comm", *ACCUMULATED),
         {"SHARDLAB_TRACE": str(trace)}),
        ("zero3_offload", ("--experiments", "gpu-accum", *ACCUMULATED), {"SHARDLAB_TRACE": str(accum_trace)}),
        ("zero3_offload", ("--experiments", "none", *ACCUMULATED), None),  # DeepSpeed's own (gpu-grads is a default)
    ])
    assert accum["losses"] == stock["losses"]
    assert [line.split()[1] for line in accum_trace.read_text().splitlines()
            if line.startswith("zero3-offload-gpu-accum ")] == ["20", "20"]  # every parameter of each rank
    assert set(levers["config"]["experiments"]) == {"gpu-cast", "gpu-grads", "lean-config", "overlap-comm"}
    assert stock["config"]["experiments"] == [] and stock["config"]["grad_accum"] == 2
    assert stock["losses"][-1] < stock["losses"][0]
    assert levers["losses"] == stock["losses"]
    assert [v["loss"] for v in levers["val_losses"]] == [v["loss"] for v in stock["val_losses"]]
    lines = [line.split() for line in trace.read_text().splitlines()]
    events = Counter(line[0] for line in lines)
    assert events["zero3-offload-gpu-cast"] == 2 * len(stock["losses"]), events  # one sub-group a rank, every step
    # nothing to page-lock on CPU processes (the GPU's branch: test_page_lock_... below, on the GPU machine)
    assert [line[1] for line in lines if line[0] == "zero3-offload-gpu-cast-pinned"] == ["0", "0"], lines
    # every parameter of each rank, once a rank: the tied embedding, 2 layers of 9, the final norm
    assert [int(line[1]) for line in lines if line[0] == "zero3-offload-gpu-grads"] == [20, 20], lines


def test_gpu_cast_sets_sub_groups_unless_the_ratio_has_its_own_and_overlap_comm_sets_overlap_comm():
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
    # overlap-comm: DeepSpeed's overlap_comm, off in zero3_offload's own config (--experiments none) and on by default
    assert stock["overlap_comm"] is False
    overlap = preset.ds_config(RunContext(**{**ctx.__dict__, "experiments": ("overlap-comm",)}))["zero_optimization"]
    assert overlap["overlap_comm"] is True
    defaults = RunContext(**{**ctx.__dict__, "experiments": preset.default_experiments("bf16-mixed")})
    assert preset.ds_config(defaults)["zero_optimization"]["overlap_comm"] is True


@pytest.mark.parametrize("lever", ["gpu-cast", "gpu-grads", "gpu-accum"])
def test_the_offload_levers_are_refused_under_another_deepspeed_and_offered_by_zero3_offload_only(lever, monkeypatch):
    import importlib.metadata

    from shardlab.core import registry
    from shardlab.core.errors import UserError
    from shardlab.core.strategy import RunContext

    assert lever in registry.get("zero3_offload").capabilities.experiments
    assert lever not in registry.get("zero3").capabilities.experiments
    offload = registry.get("zero3_offload").build()
    # gpu-grads and gpu-cast are defaults where they can run: gpu-grads not under 16-mixed, neither under another
    # DeepSpeed (below); overlap-comm, a config setting of DeepSpeed's, wherever zero3_offload runs
    assert offload.default_experiments("bf16-mixed") == ("gpu-grads", "overlap-comm", "gpu-cast")
    assert offload.default_experiments("16-mixed") == ("overlap-comm", "gpu-cast")

    def check(precision: str) -> None:
        offload.check(RunContext(accelerator="gpu", devices=1, num_nodes=1, precision=precision, grad_accum=1,
                                 grad_clip=1.0, micro_batch_size=8, experiments=(lever,)))

    if lever == "gpu-cast":
        check("16-mixed")  # no loss-scale arithmetic of its own
    else:  # DeepSpeed's fp16 overflow check reads the CPU buffer gpu-grads and gpu-accum bypass
        with pytest.raises(UserError, match=rf"^--experiments {lever}: DeepSpeed's fp16 overflow check"):
            check("16-mixed")
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.20.1")
    with pytest.raises(UserError, match=rf"^--experiments {lever}: written against DeepSpeed 0\.19\.8"):
        check("bf16-mixed")
    assert offload.default_experiments("bf16-mixed") == ("overlap-comm",)  # a setting of any DeepSpeed's config


@pytest.mark.parametrize("ratio,levers,moved", [
    (None, ("gpu-accum",), 1.0),  # R = 1: every parameter's accumulation buffer on the GPU
    (0.5, ("gpu-accum",), 1.0),  # without gpu-grads it moves the GPU-stepped sub-groups' too
    (0.5, ("gpu-grads", "gpu-accum"), "cpu share"),  # with it, only what the CPU steps
    (0.5, ("gpu-grads",), 0.0),
])
def test_the_estimate_counts_gpu_accums_buffer(ratio, levers, moved):
    """gpu-accum holds the model's 16-bit bytes per parameter it moves on the GPU for the whole run (llama-1b,
    bf16-mixed, one GPU: 2 bytes each), beside what the same run holds without it; the CPU side is unchanged."""
    from shardlab.core import memory, registry
    from shardlab.recipes.model import model_config
    from shardlab.strategies.deepspeed_offload import offloaded_share

    shape = memory.shape_of(model_config("llama-1b"))
    offload = registry.get("zero3_offload").build()

    def estimate(experiments):
        return offload.estimate(shape, memory.Workload(
            micro_batch_size=8, seq_len=2048, activation_checkpointing=False, precision="bf16-mixed", gpus_per_node=1,
            num_nodes=1, offload_ratio=ratio or 1.0, experiments=experiments, kernels="liger"))

    with_it, without = estimate(levers), estimate(tuple(x for x in levers if x != "gpu-accum"))
    share = offloaded_share(shape, 1, ratio or 1.0) if moved == "cpu share" else moved
    assert with_it.gpu_bytes - without.gpu_bytes == int(2 * share * shape.params)
    assert with_it.cpu_bytes == without.cpu_bytes


def test_page_lock_pins_cpu_tensors_in_place_where_cuda_is_and_leaves_them_elsewhere():
    """gpu-cast's source: DeepSpeed's CPU-stepped fp32 weights, page-locked where they are (the same storage), so the
    copy to the GPU runs without the host; the 16-bit copy is the host's own cast to the bit. Without CUDA, nothing."""
    import torch

    from shardlab.strategies.deepspeed_offload_cast import page_lock

    t = torch.randn(1 << 20)
    ptr = t.data_ptr()
    if not torch.cuda.is_available():
        assert page_lock([t]) == 0 and t.data_ptr() == ptr
        return
    assert page_lock([t, torch.empty(0)]) == 1 and t.is_pinned() and t.data_ptr() == ptr
    assert page_lock([t]) == 0  # already page-locked
    d = torch.empty(1 << 20, device="cuda", dtype=torch.bfloat16)
    d.copy_(t, non_blocking=True)
    torch.cuda.synchronize()
    assert torch.equal(d.cpu(), t.to(torch.bfloat16))
