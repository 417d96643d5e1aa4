"""zero3's `late-wait` lever (strategies/deepspeed_late_wait.py, switchable, one of zero3's defaults): the step's host
waits for the GPU moved after its kernels are queued.

Its values are checked where it is switched off and on within one run (tests/recipes/test_lever_ab.py: the Llama 3
shape, the same losses as zero3's defaults to the bit, acting on exactly its on-steps). Here: DeepSpeed's ZeRO-3
optimizer in one real process (late_wait_steps.py) with a step whose gradients are NaN, which DeepSpeed skips: with
the lever every step leaves what DeepSpeed's own step leaves (parameters, Adam's moments and step count, the skip
count, the norm) to the bit, and so in two sub-groups (zero3's sub-groups lever); the same with zero3's direct-grads
on top; in-process, that it is switchable and a default, and refused without fused-step and under another DeepSpeed.
The end-of-backward wait on the device has no CPU path (no streams); the GPU machine ran late_wait_steps.py under
CUDA (benchmarks/results/2026-12-05i-late-wait.md: the same values, the wait made on the device each step; with
direct-grads, benchmarks/results/2026-12-07b-direct-grads-h100.md: the same skips and step counts, Adam's moments within
2e-9, one bf16 weight one rounding step apart).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def seen() -> dict:
    done = subprocess.run([sys.executable, "-m", "tests.strategies.late_wait_steps", "29731"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_nan_step_is_skipped_as_deepspeed_skips_it_and_the_rest_is_unchanged(seen):
    stock, late = seen["stock"], seen["late_wait"]
    assert [(s["skipped"], s["overflow"], s["adam_step"]) for s in stock] == [(0, False, 1.0), (1, True, 1.0),
                                                                               (1, False, 2.0)]
    assert stock[1]["params"] == stock[0]["params"] and stock[2]["params"] != stock[1]["params"]
    assert json.dumps(late) == json.dumps(stock)  # NaN and inf compare as written
    assert seen["late_wait_steps"] == 3 and seen["epilogue_device_waits"] == 0  # CPU: no stream to wait for


def test_in_sub_groups_the_steps_leave_the_same_values(seen):
    """zero3's sub-groups lever (DeepSpeed's sub_group_size) under fused-step and late-wait: the partition stepped a
    sub-group at a time, each one's gradient cast from its span, the NaN step skipped in every sub-group; parameters,
    moments, step counts and norms as in one sub-group, to the bit here (the norm's per-sub-group sum can round
    differently in its last bit on larger models)."""
    one, split = seen["late_wait"], seen["sub_groups"]
    assert [s["sub_groups"] for s in one] == [1] * 3 and [s["sub_groups"] for s in split] == [2] * 3
    assert seen["sub_group_spans"] == 2 * 3  # fused-step's cast from the span, per sub-group and step
    strip = [{k: v for k, v in s.items() if k != "sub_groups"} for s in split]
    assert json.dumps(strip) == json.dumps([{k: v for k, v in s.items() if k != "sub_groups"} for s in one])


def test_under_direct_grads_the_steps_leave_the_same_values(seen):
    """zero3's direct-grads on top (its AdamW reading the 16-bit gradient partitions, each bucket's reduce-scatter
    skipped on one rank): after fused-step alone, after late-wait (the NaN step's kernels queued, nothing stepped, the
    step count taken back) and in two sub-groups, every value as without it, to the bit on CPU."""
    direct = seen["direct"]
    assert json.dumps(direct["fused_step"]) == json.dumps(seen["stock"])
    assert json.dumps(direct["late_wait"]) == json.dumps(seen["late_wait"])
    assert json.dumps(direct["sub_groups"]) == json.dumps(seen["sub_groups"])
    assert seen["direct_steps"] == 3 + 3 * 2 + 2  # late-wait queues the NaN step's kernels; fused-step alone does not
    assert seen["one_rank_scatters"] == 3 * 3


@pytest.mark.parametrize("lever", ["late-wait", "direct-grads"])
def test_each_needs_fused_step_and_is_refused_under_another_deepspeed(monkeypatch, lever):
    """late-wait (switchable) and direct-grads, both defaults, work through fused-step."""
    import importlib.metadata

    from shardlab.core import registry
    from shardlab.core.errors import UserError
    from shardlab.core.strategy import RunContext

    zero3 = registry.get("zero3").build()
    assert lever in zero3.capabilities.experiments
    assert lever in zero3.default_experiments("bf16-mixed") and (lever in zero3.capabilities.switchable) == (
        lever == "late-wait")

    def ctx(*levers):
        return RunContext(accelerator="gpu", devices=1, num_nodes=1, precision="bf16-mixed", grad_accum=1,
                          grad_clip=1.0, micro_batch_size=8, experiments=levers)

    zero3.check(ctx("fused-step", lever))
    with pytest.raises(UserError, match=rf"^--experiments lean-config,{lever}: {lever} works through fused-step .*"
                                        rf"--experiments lean-config,{lever},fused-step$"):
        zero3.check(ctx("lean-config", lever))
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.20.1")
    with pytest.raises(UserError, match=r"--experiments fused-step: written against DeepSpeed 0\.19\.8"):
        zero3.check(ctx("fused-step", lever))
