import math

from shardlab.core import compare as cmp
from shardlab.core.strategy import PrecisionPlan

FP32 = PrecisionPlan("fp32", "fp32", "fp32", "fp32")


def test_identical_losses_are_parity():
    p = cmp.loss_parity({"a": [5.0, 4.0], "b": [5.0, 4.0]}, "32-true")
    assert p.parity and p.max_rel_loss_diff == 0.0


def test_first_divergent_step_is_one_based_and_earliest():
    p = cmp.loss_parity({"a": [5.0, 4.0, 3.0], "b": [5.0, 4.0, 3.5], "c": [5.0, 4.5, 3.0]}, "32-true")
    assert not p.parity and (p.first_divergent_step, p.first_divergent_strategy) == (2, "c")


def test_nan_is_divergence():
    assert cmp.loss_parity({"a": [5.0], "b": [math.nan]}, "bf16-mixed").first_divergent_step == 1


def test_bf16_tolerance_is_looser_than_fp32():
    losses = {"a": [5.0], "b": [5.001]}
    assert cmp.loss_parity(losses, "bf16-mixed").parity and not cmp.loss_parity(losses, "32-true").parity


def test_align_true_precision_to_mixed_and_reduce_to_fp32():
    plans = {"ddp": PrecisionPlan("bf16", "bf16", "bf16", "bf16"), "zero3": PrecisionPlan("bf16", "fp32", "bf16", "fp32")}
    a = cmp.align("bf16-true", plans)
    assert a.precision == "bf16-mixed" and a.grad_reduce_dtype == "auto" and len(a.notes) == 1
    plans = {"ddp": PrecisionPlan("bf16", "fp32", "fp32", "fp32"), "zero3": PrecisionPlan("bf16", "fp32", "bf16", "fp32")}
    assert cmp.align("bf16-mixed", plans).grad_reduce_dtype == "fp32"
    assert cmp.mismatches(plans) == ["grad reduce differs: ddp fp32, zero3 bf16"]


def test_config_differences_ignore_strategy_and_output():
    diffs = cmp.config_differences({"a": {"strategy": "ddp", "output": "x", "lr": 0.1},
                                    "b": {"strategy": "fsdp", "output": "y", "lr": 0.2}})
    assert diffs == ["lr differs: a 0.1, b 0.2"]


def test_nothing_to_align_gives_no_notes():
    assert cmp.align("32-true", {"a": FP32, "b": FP32}).notes == []


def test_verdict_says_identical_where_the_losses_are_equal_bit_for_bit():
    p = cmp.loss_parity({"zero3": [5.0, 4.0], "fsdp": [5.0, 4.0], "ddp": [5.0, 4.00001]}, "32-true")
    assert p.identical("fsdp") and not p.identical("ddp")
    v = cmp.verdict(p, "zero3", ["fsdp", "ddp"], [])
    assert v.startswith("PARITY: every step's loss within 1e-05") and "for ddp" in v and "fsdp identical to zero3" in v
    only = cmp.loss_parity({"zero3": [5.0, 4.0], "fsdp": [5.0, 4.0]}, "32-true")
    assert cmp.verdict(only, "zero3", ["fsdp"], []) == "PARITY: fsdp identical to zero3 at every step (difference exactly 0)"
    short = cmp.loss_parity({"zero3": [5.0, 4.0], "fsdp": [5.0]}, "32-true")  # fewer steps: neither identical nor parity
    assert not short.identical("fsdp") and cmp.verdict(short, "zero3", ["fsdp"], []).startswith("DIVERGED: fsdp")


def test_step_times_leave_out_warm_up_and_measure_the_spread():
    t = cmp.step_times([9.0] * 5 + [1.0, 1.0, 1.2, 0.8, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    assert t.measured == 10 and (t.min_s, t.median_s, t.max_s) == (0.8, 1.0, 1.2)
    assert abs(t.spread - 0.2) < 1e-9  # p10 1.0 (the 0.8 is below it), p90 1.2
    assert cmp.step_times([3.0, 1.0, 1.1, 1.2, 1.3, 1.4]).measured == 3  # a short run: half its steps are warm-up


def test_throughput_is_not_ranked_from_few_or_unsteady_steps():
    steady = [1.0] * 5 + [1.0] * 12
    few = cmp.throughput({"a": cmp.step_times(steady), "b": cmp.step_times([1.0] * 6)}, {"a": 100.0, "b": 200.0})
    assert not few.ranked and few.order == []
    assert few.note == ("not ranked: b has 3 measured step(s) after warm-up, fewer than 10; run --max-steps 15 or more "
                        "to rank throughput")
    noisy = cmp.step_times([1.0] * 5 + [1.0, 1.5] * 6)
    wide = cmp.throughput({"a": cmp.step_times(steady), "b": noisy}, {"a": 100.0, "b": 200.0})
    assert not wide.ranked and "b's step times spread 40%" in wide.note and "above 25%" in wide.note


def test_throughput_ranks_steady_runs_and_says_when_a_lead_is_within_the_spread():
    a = cmp.step_times([1.0] * 5 + [1.0, 1.1] * 6)  # 10% spread
    b = cmp.step_times([1.0] * 17)
    r = cmp.throughput({"a": a, "b": b, "c": b}, {"a": 100.0, "b": 150.0, "c": 105.0})
    assert r.ranked and r.order == ["b", "c", "a"]
    assert r.note == "ranked by median tokens/s: b 1.43x c, c 1.05x a (within the step-time spread, 10%)"
