"""zero3's `direct-grads` lever (strategies/deepspeed_direct_grads.py; a default) trains what zero3 trains without it.

On CPU the AdamW steps with torch's fused kernel on the upcast 16-bit gradients, so the losses must be those of zero3's
other defaults to the bit: the Llama 3 shape (tied embeddings, validation and a checkpoint on the way) in bf16-mixed,
clipped every step, on one rank (where each bucket's gradients skip DeepSpeed's reduce-scatter too) with one and with
two micro-batches a step, on two ranks (the step part only), and resumed with the lever from a checkpoint written
without it. SHARDLAB_TRACE counts both parts on every step. tests/strategies/test_zero3_late_wait.py checks a step
whose gradients are NaN (skipped, its step count taken back) in DeepSpeed's ZeRO-3 optimizer itself, and that it needs
fused-step and DeepSpeed 0.19.8.
"""
from __future__ import annotations

from collections import Counter

from tests.conftest import LLAMA3

ONE_RANK = (*LLAMA3, "--devices", "1", "--precision", "bf16-mixed", "--grad-clip", "0.05")
TWO_RANKS = (*LLAMA3, "--precision", "bf16-mixed", "--grad-clip", "0.05")
OTHERS = "lean-config,fused-step,late-wait,sub-groups"  # zero3's other defaults
WITHOUT, WITH = ("--experiments", OTHERS), ()  # with it: zero3's defaults


def test_direct_grads_trains_what_zero3_trains(train, tmp_path):
    trace = tmp_path / "trace.txt"
    stock, lever, stock2, lever2 = train.many([
        ("zero3", (*ONE_RANK, *WITHOUT), None),
        ("zero3", (*ONE_RANK, *WITH), {"SHARDLAB_TRACE": str(trace)}),
        ("zero3", (*ONE_RANK, *WITHOUT, "--grad-accum", "2"), None),
        ("zero3", (*ONE_RANK, *WITH, "--grad-accum", "2"), None)])
    two_stock, two_lever = train.many([("zero3", (*TWO_RANKS, *WITHOUT), None), ("zero3", (*TWO_RANKS, *WITH), None)])
    assert lever["config"]["experiments"] == [*OTHERS.split(","), "direct-grads"]
    assert lever["losses"] == stock["losses"] and stock["losses"][-1] < stock["losses"][0]
    assert [v["loss"] for v in lever["val_losses"]] == [v["loss"] for v in stock["val_losses"]]
    assert lever2["losses"] == stock2["losses"] and lever2["losses"] != stock["losses"]
    assert two_lever["losses"] == two_stock["losses"]
    events = Counter(line.split()[0] for line in trace.read_text().splitlines())
    steps = len(stock["losses"])
    assert events["zero3-direct-grads"] == steps, events  # one sub-group on the tiny shape
    assert events["zero3-one-rank-scatter"] >= steps and events["zero3-clip-in-adamw"] == steps, events
    # resumed with the lever from the checkpoint of step 2 of the run without it (the fused AdamW's state, its step
    # count a tensor on the device there)
    stock_checkpoints = train.checkpoints("zero3", *ONE_RANK, *WITHOUT)
    resumed = train("zero3", *ONE_RANK, *WITH, "--resume", str(stock_checkpoints / "step-000002"))
    assert resumed["losses"][-1] == stock["losses"][-1]


def test_a_gpu_run_takes_it_by_default_without_a_warning():
    """Resolved for one 80 GiB GPU (in-process, nothing runs): zero3's defaults end with it, and the run says nothing of
    it (before it ran on a GPU it warned). Under 16-mixed the defaults leave it out (test_zero3_experiments.py)."""
    from shardlab.core.config import RunConfig
    from shardlab.recipes.resolve import resolve_run

    gpu = dict(strategy="zero3", model="llama-1b", accelerator="gpu", gpus=1, gpu_memory_gib=80)
    run = resolve_run(RunConfig(**gpu), for_run=False)
    assert run.config.experiments == [*OTHERS.split(","), "direct-grads"] and run.warnings == []


def test_the_step_holds_no_fp32_gradient():
    """The memory model: without the lever the step adds a sub-group's fp32 gradient (4 bytes a parameter of the
    largest), with it nothing."""
    from shardlab.core.memory import Workload, shape_of
    from shardlab.recipes.model import model_config
    from shardlab.strategies.deepspeed_memory import zero3_states

    shape = shape_of(model_config("llama-1b"))
    work = Workload(micro_batch_size=8, seq_len=2048, activation_checkpointing=True, precision="bf16-mixed",
                    gpus_per_node=1, num_nodes=1)
    cast = zero3_states(shape, work, False, False, fused_step=True, sub_group_size=int(2e8))
    direct = zero3_states(shape, work, False, False, fused_step=True, sub_group_size=int(2e8), direct_grads=True)
    assert cast.step_only > 4 * 1.5e8 and direct.step_only == 0 and direct.gpu == cast.gpu - cast.step_only
