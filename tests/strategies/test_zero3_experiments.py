"""zero3's experiments (strategies/deepspeed_experiments.py), five on by default: each trains the model stock ZeRO-3
trains.

One `recipe compare` of DeepSpeed's stock ZeRO-3 (zero3:experiment=none) against zero3 (its defaults: lean-config,
fused-step, late-wait, sub-groups, direct-grads) and zero3:experiment=lean-config on 2 CPU ranks, on the Llama 3 shape
(tied embeddings, 128k vocabulary) in bf16-mixed with clipping on every step, so that every replaced part of the step
runs: SHARDLAB_TRACE counts, per rank and step, the fp32 norm (strategies/deepspeed_zero3_step.py), the 16-bit gradient
stepped as it is (strategies/deepspeed_direct_grads.py) and the clip handed to the AdamW; then one resume of the default
run from its own checkpoint. The ds_config of lean-config and fused-step's refusals are checked in-process.
"""
from __future__ import annotations

import json
from collections import Counter

import pytest

STEPS = 6
FLAGS = ("--model", "tiny-llama3", "--max-steps", str(STEPS), "--micro-batch-size", "2", "--seq-len", "64",
         "--precision", "bf16-mixed", "--grad-clip", "0.05", "--no-export", "--checkpoint-every", "3")
NAMES = ("zero3:experiment=none", "zero3", "zero3:experiment=lean-config")


@pytest.fixture(scope="module")
def compared(recipe, module_folder) -> dict:
    out = module_folder("zero3-experiments")
    trace = out / "trace.txt"
    proc = recipe("compare", "--strategies", ",".join(NAMES), "--accelerator", "cpu", "--devices", "2", *FLAGS,
                  "--output", out, env={"SHARDLAB_TRACE": str(trace)})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    runs = {n: json.loads((out / "runs" / n.replace(":", "-") / "summary.json").read_text()) for n in NAMES}
    events = Counter(line.split()[0] for line in trace.read_text().splitlines())
    return {"metrics": json.loads((out / "metrics.json").read_text()), "runs": runs, "events": events, "out": out}


def test_zero3_experiments_train_the_model_zero3_trains(compared):
    from tests.conftest import rel_diff

    m, runs = compared["metrics"], compared["runs"]
    assert m["parity"] and m["verdict"].startswith("PARITY"), m["verdict"]
    stock = runs["zero3:experiment=none"]["losses"]
    assert stock[-1] < stock[0] and runs["zero3:experiment=none"]["config"]["experiments"] == []
    assert runs["zero3"]["config"]["experiments"] == ["lean-config", "fused-step", "late-wait", "sub-groups",
                                                      "direct-grads"]
    assert runs["zero3:experiment=lean-config"]["config"]["experiments"] == ["lean-config"]
    for name in NAMES[1:]:
        assert rel_diff(runs[name]["losses"], stock) < 2e-3, (name, runs[name]["losses"], stock)
    # lean-config changes no arithmetic
    assert runs["zero3:experiment=lean-config"]["losses"] == stock


def test_fused_step_replaced_every_part_on_every_rank_and_step(compared):
    events = compared["events"]
    for event in ("zero3-norm-fp32", "zero3-direct-grads", "zero3-clip-in-adamw"):
        assert events[event] == 2 * STEPS, events  # the default run only: 2 ranks x 6 steps


def test_a_default_zero3_checkpoint_resumes_to_the_same_losses(compared, recipe, tmp_path):
    """fused-step steps with a fused AdamW, whose Adam step counter is a tensor: its checkpoint resumes."""
    checkpoint = compared["out"] / "runs" / "zero3" / "checkpoints" / "step-000003"
    proc = recipe("run", "--strategy", "zero3", "--accelerator", "cpu", "--devices", "2",
                  *FLAGS, "--resume", checkpoint, "--output", tmp_path / "resumed")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    again = json.loads((tmp_path / "resumed" / "summary.json").read_text())["losses"]
    assert again[-3:] == compared["runs"]["zero3"]["losses"][-3:]


def test_lean_config_turns_off_the_timer_the_buckets_and_the_linear_wrapper():
    from shardlab.core import registry
    from shardlab.core.strategy import RunContext

    ctx = RunContext(accelerator="gpu", devices=1, num_nodes=1, precision="bf16-mixed", grad_accum=1, grad_clip=1.0,
                     micro_batch_size=8, experiments=("lean-config",))
    config = registry.get("zero3").build().ds_config(ctx)
    assert config["timers"] == {"throughput": {"enabled": False}}
    assert config["zero_optimization"]["contiguous_gradients"] is False
    assert config["zero_optimization"]["memory_efficient_linear"] is False
    stock = registry.get("zero3").build().ds_config(RunContext(**{**ctx.__dict__, "experiments": ()}))
    assert "timers" not in stock and stock["zero_optimization"]["contiguous_gradients"] is True


def test_sub_groups_sets_the_sub_group_size_and_the_estimate_steps_one_at_a_time():
    """sub-groups: DeepSpeed's sub_group_size 2e8 (1e12 without it); not under offload, whose sub-groups are its own
    (1e9, or 1e7 for a ratio). The estimate's step holds the largest sub-group's fp32 gradient, not the partition's:
    the 3B shape with checkpointing 9.8 GiB lower (measured on one H100: 50.99 against 59.91 GiB,
    results/2026-12-06c-sub-groups.md); without checkpointing backward's peak is unchanged."""
    from shardlab.core import memory, registry
    from shardlab.core.strategy import RunContext
    from shardlab.recipes.model import model_config

    ctx = RunContext(accelerator="gpu", devices=1, num_nodes=1, precision="bf16-mixed", grad_accum=1, grad_clip=1.0,
                     micro_batch_size=4, experiments=("sub-groups",))
    zero3 = registry.get("zero3").build()
    assert zero3.ds_config(ctx)["zero_optimization"]["sub_group_size"] == 2 * 10**8
    stock = RunContext(**{**ctx.__dict__, "experiments": ()})
    assert zero3.ds_config(stock)["zero_optimization"]["sub_group_size"] == 10**12
    assert "sub_group_size" not in registry.get("zero3_offload").build().ds_config(ctx)["zero_optimization"]
    shape = memory.shape_of(model_config("llama-3.2-3b"))
    peaks = {}
    for ac in (True, False):
        for levers in (("lean-config", "fused-step", "late-wait"), ("lean-config", "fused-step", "late-wait", "sub-groups")):
            work = memory.Workload(micro_batch_size=4, seq_len=2048, activation_checkpointing=ac, precision="bf16-mixed",
                                   gpus_per_node=1, num_nodes=1, kernels="liger", experiments=levers)
            peaks[ac, len(levers)] = zero3.estimate(shape, work).gpu_bytes / 2**30
    assert 9.5 < peaks[True, 3] - peaks[True, 4] < 10.5 and peaks[False, 3] == peaks[False, 4], peaks


def test_the_checkpoint_layout_is_the_sub_group_size_and_ratio_deepspeed_runs_with(tmp_path):
    """ZeRO-3's own checkpoint holds its optimizer per sub-group (and, with a ratio, on the GPU or the CPU by
    sub-group): meta.json records both, as the run's config makes them, so that a resume in another layout reads the
    portable copy (recipes/checkpoint.py). ZeRO-2 has none."""
    from shardlab.core import registry
    from shardlab.core.strategy import RunContext

    def layout(name, *levers, ratio=1.0, native=None):
        ctx = RunContext(accelerator="gpu", devices=1, num_nodes=1, precision="bf16-mixed", grad_accum=1, grad_clip=1.0,
                         micro_batch_size=4, experiments=levers, offload_ratio=ratio, native_config=native)
        return registry.get(name).build().checkpoint_layout(ctx)

    assert layout("zero3", "lean-config", "fused-step", "late-wait", "sub-groups") == {"sub_group_size": 2 * 10**8}
    assert layout("zero3") == {"sub_group_size": 10**12}  # --experiments none: Lightning's
    assert layout("zero3", "sub-groups", native={"zero_optimization": {"sub_group_size": 5000}}) == {"sub_group_size": 5000}
    assert layout("zero3_offload") == {"sub_group_size": 10**9, "offload_ratio": 1.0}  # DeepSpeed's default
    assert layout("zero3_offload", ratio=0.5) == {"sub_group_size": 10**7, "offload_ratio": 0.5}
    assert layout("zero2") == {}


def test_in_sub_groups_two_ranks_train_what_one_sub_group_trains_and_resume_across(train, tmp_path):
    """tiny-llama3 is below 2e8 parameters, so a --deepspeed-config sub_group_size of 5,000 cuts each rank's partition
    into 8 sub-groups: the same losses and validation losses as test_parity's zero3 run (one sub-group), to 1e-6
    (here to the bit), each sub-group stepped from its 16-bit span (direct-grads). Its step-2 checkpoint, resumed
    under zero3's defaults (one sub-group here), loads from the portable copy and ends where the uninterrupted run
    ends."""
    from tests.conftest import LLAMA3, rel_diff

    config = tmp_path / "ds.json"
    config.write_text(json.dumps({"zero_optimization": {"stage": 3, "sub_group_size": 5000}}))
    trace = tmp_path / "trace.txt"
    split = train("zero3", *LLAMA3, "--deepspeed-config", str(config), env={"SHARDLAB_TRACE": str(trace)})
    one = train("zero3", *LLAMA3)
    spans = [line.split()[0] for line in trace.read_text().splitlines()].count("zero3-direct-grads")
    assert spans == 2 * 3 * 8, spans  # ranks x steps x sub-groups
    assert rel_diff(split["losses"], one["losses"]) < 1e-6
    assert rel_diff([v["loss"] for v in split["val_losses"]], [v["loss"] for v in one["val_losses"]]) < 1e-6
    split_checkpoints = train.checkpoints("zero3", *LLAMA3, "--deepspeed-config", str(config),
                                          env={"SHARDLAB_TRACE": str(trace)})
    resumed = train("zero3", *LLAMA3, "--resume", str(split_checkpoints / "step-000002"))
    assert resumed["resumed_through"] == "portable copy"
    assert rel_diff(resumed["losses"][-1:], one["losses"][-1:]) < 1e-6
    assert rel_diff([resumed["val_losses"][-1]["loss"]], [one["val_losses"][-1]["loss"]]) < 1e-6


def test_fused_step_is_refused_under_another_deepspeed_and_16_mixed(monkeypatch):
    """It replaces private methods of DeepSpeed 0.19.8's ZeRO-3: under any other version, one line before any process;
    under fp16 loss scaling it has never run. zero3's defaults leave it out there instead."""
    import importlib.metadata

    from shardlab.core import registry
    from shardlab.core.errors import UserError
    from shardlab.core.strategy import RunContext

    zero3 = registry.get("zero3").build()

    def check(names: tuple[str, ...], precision: str) -> None:
        zero3.check(RunContext(accelerator="gpu", devices=1, num_nodes=1, precision=precision, grad_accum=1,
                               grad_clip=1.0, micro_batch_size=8, experiments=names))

    check(("fused-step",), "bf16-mixed")  # the installed (pinned) version
    assert zero3.default_experiments("bf16-mixed") == ("lean-config", "fused-step", "late-wait", "sub-groups",
                                                       "direct-grads")
    for name in ("fused-step", "late-wait", "direct-grads"):  # late-wait and direct-grads work through fused-step
        assert zero3.experiment_refusal(name, "16-mixed").startswith("not yet run under fp16 loss scaling")
    with pytest.raises(UserError, match=r"^--experiments fused-step: not yet run under fp16 loss scaling"):
        check(("fused-step",), "16-mixed")
    assert zero3.default_experiments("16-mixed") == ("lean-config", "sub-groups")
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.20.1")
    with pytest.raises(UserError, match=r"--experiments fused-step: written against DeepSpeed 0\.19\.8, and deepspeed "
                                        r"0\.20\.1 is installed"):
        check(("lean-config", "fused-step"), "bf16-mixed")
    check(("lean-config", "sub-groups"), "bf16-mixed")  # settings only: any version
    assert zero3.default_experiments("bf16-mixed") == ("lean-config", "sub-groups")
