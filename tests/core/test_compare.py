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
