"""A/B comparison logic: the precision audit and its alignment, loss parity, and the verdict.

Pure functions over plans and summaries; `recipes/compare.py` runs the processes and writes the report.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from shardlab.core.strategy import PrecisionPlan

# Relative tolerance on every step's loss against the first strategy.
# fp32: the backends do the same arithmetic in a different order (measured on CPU: <= 1e-7 relative).
# 16-bit: bf16 rounding in matmuls and reductions differs by backend and compounds over steps. Measured
# cross-backend maxima: CPU, tiny, 20 steps, ddp/zero2/zero3/fsdp bf16-mixed aligned: 6.0e-4
# (benchmarks/results/2026-12-02-compare-cpu-bf16/); H200, llama-1b, 50 steps, zero3/fsdp/zero3_offload:
# 4.5e-3 (benchmarks/results/2026-12-02-compare-h200/). 2e-2 is 4x the larger, and still catches a
# wrong learning rate, loss scale or clipping, which move the loss by more within a few steps.
TOLERANCE = {"32-true": 1e-5, "bf16-mixed": 2e-2, "bf16-true": 2e-2, "16-mixed": 2e-2}

_TRUE_TO_MIXED = {"bf16-true": "bf16-mixed", "16-true": "16-mixed"}


@dataclass
class Alignment:
    precision: str
    grad_reduce_dtype: str
    notes: list[str] = field(default_factory=list)


def align(precision: str, plans: dict[str, PrecisionPlan]) -> Alignment:
    """One pass: settings that make every strategy keep fp32 master weights and reduce gradients alike.

    Changing the precision changes the plans, so callers re-plan and call again until no notes come back.
    """
    result = Alignment(precision=precision, grad_reduce_dtype="auto")
    masters = {p.master for p in plans.values()}
    if len(masters) > 1 and precision in _TRUE_TO_MIXED:
        result.precision = _TRUE_TO_MIXED[precision]
        result.notes.append(f"precision {precision} -> {result.precision}: fp32 master weights for every strategy, "
                            f"as DeepSpeed keeps them anyway (masters were {', '.join(sorted(masters))})")
    reduces = {p.grad_reduce for p in plans.values()}
    if len(reduces) > 1:
        result.grad_reduce_dtype = "fp32"
        result.notes.append(f"gradient reduction in fp32 for every strategy (was {', '.join(sorted(reduces))})")
    return result  # no notes: nothing left to align


def mismatches(plans: dict[str, PrecisionPlan]) -> list[str]:
    """Each dtype on which the strategies disagree: a likely cause of divergence."""
    out = []
    for part in PrecisionPlan.__dataclass_fields__:
        values = {name: getattr(plan, part) for name, plan in plans.items()}
        if len(set(values.values())) > 1:
            out.append(f"{part.replace('_', ' ')} differs: " + ", ".join(f"{k} {v}" for k, v in values.items()))
    return out


def config_differences(configs: dict[str, dict[str, Any]], ignore: tuple[str, ...] = ("strategy", "output", "offload")) -> list[str]:
    """Run settings (other than the strategy) that differ between runs."""
    first = next(iter(configs))
    out = []
    for key in configs[first]:
        if key in ignore:
            continue
        values = {name: cfg.get(key) for name, cfg in configs.items()}
        if len({repr(v) for v in values.values()}) > 1:
            out.append(f"{key} differs: " + ", ".join(f"{k} {v}" for k, v in values.items()))
    return out


@dataclass
class LossParity:
    tolerance: float
    abs_diff: dict[str, list[float]]
    rel_diff: dict[str, list[float]]
    max_abs_loss_diff: float
    max_rel_loss_diff: float
    first_divergent_step: Optional[int]  # 1-based optimizer step
    first_divergent_strategy: Optional[str]

    @property
    def parity(self) -> bool:
        return self.first_divergent_step is None

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "parity": self.parity}


def loss_parity(losses: dict[str, list[float]], precision: str) -> LossParity:
    """Every strategy's per-step loss against the first strategy's."""
    names = list(losses)
    ref = losses[names[0]]
    tol = TOLERANCE[precision]
    abs_d: dict[str, list[float]] = {}
    rel_d: dict[str, list[float]] = {}
    first: tuple[Optional[int], Optional[str]] = (None, None)
    for name in names[1:]:
        n = min(len(ref), len(losses[name]))
        abs_d[name] = [abs(losses[name][i] - ref[i]) for i in range(n)]
        rel_d[name] = [abs_d[name][i] / max(abs(ref[i]), 1e-12) for i in range(n)]
        bad = next((i + 1 for i, r in enumerate(rel_d[name]) if not r <= tol), None)  # NaN counts as bad
        if len(losses[name]) != len(ref):
            bad = min(bad or n + 1, n + 1)
        if bad is not None and (first[0] is None or bad < first[0]):
            first = (bad, name)
    flat_abs = [x for v in abs_d.values() for x in v] or [0.0]
    flat_rel = [x for v in rel_d.values() for x in v] or [0.0]
    return LossParity(tol, abs_d, rel_d, max(flat_abs), max(flat_rel), first[0], first[1])
