"""zero3's experimental levers (`--experiments`, Capabilities.experiments): what each is, and the config it sets.

From a reading of DeepSpeed 0.19.8's ZeRO-3 step for where a one-GPU step spends ~18 ms more than FSDP2's (llama-1b,
61,241 against 65,579 tokens/s, results/2026-12-04b-peers-h200.md). Neither is measured on a GPU yet, so neither is a
default. Both train the model zero3 trains: lean-config changes no arithmetic (CPU: losses identical at every step),
fused-step the rounding of the clip norm (fp32, not fp64) and of the clip (a division in the AdamW kernel, not a
multiplication by the reciprocal): CPU, tiny Llama 3 shape, 6 steps clipped every step, at most 1.7e-7 relative in fp32
and 1.8e-5 in bf16-mixed (tests/strategies/test_zero3_experiments.py). The memory estimate counts zero3's default.
"""
from __future__ import annotations

from typing import Any

ZERO3 = {
    "lean-config": "DeepSpeed's throughput timer (a CUDA sync twice a step), contiguous gradient buckets and its "
                   "Python linear wrapper turned off",
    "fused-step": "the clip norm in one fp32 foreach kernel (not per tensor in fp64), the fp32 gradient cast from its "
                  "flat buffer (no concatenated copy) and the clip folded into a fused AdamW",
}

FUSED_STEP_DEEPSPEED = "0.19.8"  # fused-step replaces private methods of this version's ZeRO-3 (deepspeed_zero3_step.py)


def configure(names: tuple[str, ...], zero: dict[str, Any], top: dict[str, Any]) -> None:
    """lean-config's settings, into the ds_config's zero_optimization section and its top level."""
    if "lean-config" in names:
        # the timer syncs the GPU at each forward's start and in engine.step; the contiguous bucket is a copy of each
        # gradient that reduce_scatter never reads; memory_efficient_linear swaps torch's F.linear for a Python
        # autograd.Function in every process (the same GEMMs and saved tensors)
        zero.update(contiguous_gradients=False, memory_efficient_linear=False)
        top["timers"] = {"throughput": {"enabled": False}}


def check(names: tuple[str, ...]) -> None:
    """fused-step only under the DeepSpeed whose private methods it replaces."""
    if "fused-step" not in names:
        return
    from importlib.metadata import version

    from shardlab.core.errors import UserError

    if version("deepspeed") != FUSED_STEP_DEEPSPEED:
        raise UserError(f"--experiments fused-step: written against DeepSpeed {FUSED_STEP_DEEPSPEED}, and deepspeed "
                        f"{version('deepspeed')} is installed; pip install deepspeed=={FUSED_STEP_DEEPSPEED} or drop "
                        f"the experiment")
