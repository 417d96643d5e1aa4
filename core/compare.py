"""A/B comparison logic: the precision audit and its alignment, loss parity, and the verdict.

Pure functions over plans and summaries; `recipes/compare.py` runs the processes and writes the report.
"""
from __future__ import annotations

import statistics
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
# A float8 run (--float8, `recipe compare` entry A:float8) against bf16 ones: the same model trained with another
# arithmetic, not the same arithmetic reordered. e4m3 keeps 3 mantissa bits to bf16's 7, so every converted matmul
# rounds its inputs ~16x more coarsely, and the per-tensor scales follow the data. Measured: CPU, tiny, 50 steps,
# fsdp against fsdp:float8 and ddp:float8, bf16-mixed: at most 4.4e-3. Not yet measured on a GPU shape. 5e-2 stays above what float8 is
# reported to cost (torchtitan's Llama 3 float8 curves within ~1% of bf16) and below what a broken scale or
# cast does within a few steps (a loss that stalls or climbs).
FLOAT8_TOLERANCE = 5e-2

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
    identical_to_reference: list[str] = field(default_factory=list)  # as many steps, every loss equal bit for bit

    @property
    def parity(self) -> bool:
        return self.first_divergent_step is None

    def identical(self, name: str) -> bool:
        """Every step's loss equal to the reference's, bit for bit."""
        return name in self.identical_to_reference

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "parity": self.parity}


def tolerance(precision: str, float8: bool = False) -> float:
    """The relative per-step tolerance: the precision's, or FLOAT8_TOLERANCE when float8 runs meet bf16 ones."""
    return max(TOLERANCE[precision], FLOAT8_TOLERANCE) if float8 else TOLERANCE[precision]


def loss_parity(losses: dict[str, list[float]], precision: str, float8: bool = False) -> LossParity:
    """Every strategy's per-step loss against the first strategy's. float8: some runs' linears multiply in float8
    and others' not (the wider tolerance)."""
    names = list(losses)
    ref = losses[names[0]]
    tol = tolerance(precision, float8)
    abs_d: dict[str, list[float]] = {}
    rel_d: dict[str, list[float]] = {}
    first: tuple[Optional[int], Optional[str]] = (None, None)
    identical = []
    for name in names[1:]:
        n = min(len(ref), len(losses[name]))
        abs_d[name] = [abs(losses[name][i] - ref[i]) for i in range(n)]
        rel_d[name] = [abs_d[name][i] / max(abs(ref[i]), 1e-12) for i in range(n)]
        bad = next((i + 1 for i, r in enumerate(rel_d[name]) if not r <= tol), None)  # NaN counts as bad
        if len(losses[name]) != len(ref):
            bad = min(bad or n + 1, n + 1)
        if bad is not None and (first[0] is None or bad < first[0]):
            first = (bad, name)
        if losses[name] == ref:
            identical.append(name)
    flat_abs = [x for v in abs_d.values() for x in v] or [0.0]
    flat_rel = [x for v in rel_d.values() for x in v] or [0.0]
    return LossParity(tol, abs_d, rel_d, max(flat_abs), max(flat_rel), first[0], first[1], identical)


def val_loss_parity(val_losses: dict[str, list[dict]], precision: str, float8: bool = False) -> Optional[dict[str, Any]]:
    """The validation losses ({step, loss, tokens} each) against the first strategy's, with the training losses'
    tolerance; None when the runs did not validate. The steps must be the same, as must the targets counted."""
    names = list(val_losses)
    if not any(val_losses.values()):
        return None
    ref = names[0]
    steps = {n: [v["step"] for v in val_losses[n]] for n in names}
    parity = loss_parity({n: [v["loss"] for v in val_losses[n]] for n in names}, precision, float8)
    other_steps = [n for n in names[1:] if steps[n] != steps[ref] or
                   [v["tokens"] for v in val_losses[n]] != [v["tokens"] for v in val_losses[ref]]]
    ok = parity.parity and not other_steps
    if other_steps:
        text = (f"validation DIVERGED: {', '.join(other_steps)} validated at other steps or over other targets than "
                f"{ref} ({ref}: steps {steps[ref]})")
    elif not ok:
        at = steps[ref][parity.first_divergent_step - 1] if parity.first_divergent_step <= len(steps[ref]) else None
        text = (f"validation DIVERGED: {parity.first_divergent_strategy} leaves {ref} at step {at} (tolerance "
                f"{parity.tolerance:g} relative, max {parity.max_rel_loss_diff:.2e})")
    elif len(parity.identical_to_reference) == len(names) - 1:
        text = f"validation PARITY: {', '.join(names[1:])} identical to {ref} at steps {steps[ref]}"
    else:
        text = (f"validation PARITY: every validation loss within {parity.tolerance:g} relative of {ref} (max "
                f"{parity.max_rel_loss_diff:.2e}) at steps {steps[ref]}")
    return {"verdict": text, "parity": ok, "steps": steps[ref], "max_rel_loss_diff": parity.max_rel_loss_diff,
            "max_abs_loss_diff": parity.max_abs_loss_diff, "tolerance": parity.tolerance,
            "losses": {n: [v["loss"] for v in val_losses[n]] for n in names}, "rel_loss_diff": parity.rel_diff}


def verdict(parity: LossParity, reference: str, others: list[str], suspects: list[str]) -> str:
    """The report's first line: parity or where it diverged; "identical" where the losses are equal bit for bit."""
    if not parity.parity:
        return (f"DIVERGED: {parity.first_divergent_strategy} leaves {reference} at step {parity.first_divergent_step} "
                f"(tolerance {parity.tolerance:g} relative, max {parity.max_rel_loss_diff:.2e}); "
                f"suspects: {'; '.join(suspects) or 'none found in the audit'}")
    same = [n for n in others if parity.identical(n)]
    if same == others:
        return f"PARITY: {', '.join(others)} identical to {reference} at every step (difference exactly 0)"
    close = [n for n in others if n not in same]
    text = (f"PARITY: every step's loss within {parity.tolerance:g} relative of {reference} "
            f"(max {parity.max_rel_loss_diff:.2e}) for {', '.join(close)}")
    return text + (f"; {', '.join(same)} identical to {reference} at every step" if same else "")


# Throughput. Step times after warm-up (the first min(5, steps / 2) steps: compilation, allocator and
# communicator set-up; as recipes/metrics.py's median). A ranking needs enough steps and steady ones: the
# issue-22 CPU compare ranked from 3 measured steps whose times spread 35-49%, i.e. noise.
MIN_MEASURED_STEPS = 10
MAX_STEP_SPREAD = 0.25  # (p90 - p10) / median of the measured step times
WARMUP_STEPS = 5


@dataclass
class StepTimes:
    measured: int  # steps after warm-up
    min_s: float
    median_s: float
    max_s: float
    spread: float  # (p90 - p10) / median: 0 is perfectly steady


def step_times(step_s: list[float]) -> StepTimes:
    times = sorted(step_s[min(WARMUP_STEPS, len(step_s) // 2):])
    q = lambda f: times[min(len(times) - 1, int(f * len(times)))]  # noqa: E731
    median = statistics.median(times)
    return StepTimes(len(times), times[0], median, times[-1], (q(0.9) - q(0.1)) / median)


@dataclass
class Throughput:
    ranked: bool
    order: list[str]  # fastest first; empty when not ranked
    note: str


def throughput(times: dict[str, StepTimes], tokens_per_s: dict[str, float]) -> Throughput:
    """A ranking by median tokens/s, or why there is none: too few measured steps, or too unsteady."""
    few = {n: t.measured for n, t in times.items() if t.measured < MIN_MEASURED_STEPS}
    if few:
        worst = min(few, key=few.get)
        return Throughput(False, [], f"not ranked: {worst} has {few[worst]} measured step(s) after warm-up, fewer than "
                                     f"{MIN_MEASURED_STEPS}; run --max-steps {MIN_MEASURED_STEPS + WARMUP_STEPS} or "
                                     f"more to rank throughput")
    wide = {n: t.spread for n, t in times.items() if t.spread > MAX_STEP_SPREAD}
    if wide:
        worst = max(wide, key=wide.get)
        return Throughput(False, [], f"not ranked: {worst}'s step times spread {wide[worst]:.0%} (p90 - p10 over the "
                                     f"median), above {MAX_STEP_SPREAD:.0%}: the machine was not steady; rerun on an "
                                     f"idle machine")
    order = sorted(times, key=lambda n: -tokens_per_s[n])
    parts = []
    for fast, slow in zip(order, order[1:]):
        ratio = tokens_per_s[fast] / tokens_per_s[slow]
        noise = max(times[fast].spread, times[slow].spread)
        within = f" (within the step-time spread, {noise:.0%})" if ratio - 1 <= noise else ""
        parts.append(f"{fast} {ratio:.2f}x {slow}{within}")
    return Throughput(True, order, "ranked by median tokens/s: " + ", ".join(parts))
