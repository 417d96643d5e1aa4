"""`SHARDLAB_AB=LEVER[:BLOCK] recipe run ...`: a lever's speed against itself switched off, within one run.

After core/switches.WARMUP optimizer steps with the lever on (as the run has it), the run alternates blocks of BLOCK
steps (default 4) with the lever off and on, in the order off, on, on, off, off, on, on, off, ... (a drift over the
run falls on both sides alike). The first step of each block is left out, as it may pay for the switch; each side's
figure is the median of its other step times (StepRecorder's: step end to step end, the host waiting for the GPU at
each end). summary.json's `lever_ab` has both sides, `speedup` (the off side's median step over the on side's) and a 95%
interval of it from resampling each side's blocks. Every rank switches at the same steps; with SHARDLAB_TRACE set,
each step's start is noted with its side (`ab-step-on`, `ab-step-off`).

A diagnostic, as SHARDLAB_PROFILE is: the run trains on through both sides, so its losses mix them (the same values
for a lever that changes none: direct-cast, no-fetch-sync, param-lists, no-nvtx). Bad values are refused before any
process starts (core/switches.check).
"""
from __future__ import annotations

import random
import statistics
from typing import Optional

import lightning.pytorch as pl

from shardlab.core import switches, trace

RESAMPLES = 2000


def side(step: int, block: int) -> tuple[bool, bool]:
    """(lever on, counted) for optimizer step `step` (0-based)."""
    if step < switches.WARMUP:
        return True, False
    k, i = divmod(step - switches.WARMUP, block)
    return k % 4 in (1, 2), i > 0


class LeverAB(pl.Callback):
    """Switches the lever before each optimizer step as `side` says; `result` reads the step times afterwards."""

    def __init__(self, value: str) -> None:
        self.lever, self.block = switches.parse(value)
        self._step = -1

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step != self._step:  # the first micro-batch of an optimizer step
            self._step = trainer.global_step
            on = side(self._step, self.block)[0]
            switches.switch(self.lever, on)
            if trace.enabled():  # what the lever does is noted after this, until the next step's mark
                trace.note("ab-step-on" if on else "ab-step-off")

    def on_train_end(self, trainer, pl_module) -> None:
        switches.switch(self.lever, True)

    def result(self, step_s: list[float], tokens_per_step: int) -> dict:
        return summarize(self.lever, self.block, step_s, tokens_per_step)


def summarize(lever: str, block: int, step_s: list[float], tokens_per_step: int, seed: int = 0) -> dict:
    """Both sides' median step time and tokens/s, the speedup and its 95% interval (resampled blocks)."""
    blocks: dict[int, tuple[bool, list[float]]] = {}
    for step, seconds in enumerate(step_s):
        on, counted = side(step, block)
        if counted:
            blocks.setdefault((step - switches.WARMUP) // block, (on, []))[1].append(seconds)
    sides = {name: [b for on, b in blocks.values() if on == want] for name, want in (("on", True), ("off", False))}
    medians = {name: statistics.median([t for b in bs for t in b]) for name, bs in sides.items() if bs}
    out: dict = {"lever": lever, "block": block, "warmup": switches.WARMUP,
                 "steps": {name: sum(len(b) for b in bs) for name, bs in sides.items()},
                 "median_step_s": medians,
                 "tokens_per_s": {name: round(tokens_per_step / m) for name, m in medians.items()},
                 "speedup": None, "speedup_95": None}
    if len(medians) == 2:
        out["speedup"] = medians["off"] / medians["on"]
        out["speedup_95"] = _interval(sides["on"], sides["off"], seed)
    return out


def _interval(on: list[list[float]], off: list[list[float]], seed: int) -> Optional[list[float]]:
    """2.5th and 97.5th percentiles of median(off) / median(on) over resamplings of each side's blocks."""
    if len(on) < 2 or len(off) < 2:
        return None
    rng = random.Random(seed)

    def median_of(blocks: list[list[float]]) -> float:
        return statistics.median([t for b in rng.choices(blocks, k=len(blocks)) for t in b])

    ratios = sorted(median_of(off) / median_of(on) for _ in range(RESAMPLES))
    return [ratios[int(0.025 * RESAMPLES)], ratios[int(0.975 * RESAMPLES) - 1]]


def line(result: dict) -> str:
    """What the run's last lines say of the A/B."""
    if result["speedup"] is None:
        return f"A/B {result['lever']}: too few steps on one side ({result['steps']})"
    m, lo_hi = result["median_step_s"], result["speedup_95"]
    interval = f" (95%: {lo_hi[0]:.3f}-{lo_hi[1]:.3f})" if lo_hi else ""
    return (f"A/B {result['lever']}: on {m['on'] * 1e3:.1f} ms, off {m['off'] * 1e3:.1f} ms a step "
            f"({result['steps']['on']} and {result['steps']['off']} steps): {result['speedup']:.3f}x with it{interval}")
