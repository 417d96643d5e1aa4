"""Levers switched off and on between the steps of one run, for a paired A/B of a lever's speed in one process.

A lever worth ~1% is smaller than what separates two runs of the same config: the second run of a pair was 0.4-2.3%
faster on one warm machine, and the same config differed by up to 6% between machines (one H100,
benchmarks/results/2026-12-05g-h100.md). `SHARDLAB_AB=LEVER` (recipes/lever_ab.py) instead runs the lever off and on
in alternating blocks of steps of one run and reports each side's step time.

A lever that can switch (Capabilities.switchable) asks `on(name)` where it acts and, off, takes the path it replaces,
or, where it acts through a setting of the backend's, has `listen` call it back to change that setting; switching
happens only between optimizer steps. Nothing here knows a backend.
"""
from __future__ import annotations

from typing import Callable

_off: set[str] = set()
_listeners: dict[str, list[Callable[[bool], None]]] = {}


def on(name: str) -> bool:
    """Whether lever `name` acts now: always, unless an A/B has switched it off for the coming steps."""
    return name not in _off


def switch(name: str, value: bool) -> None:
    """Turn lever `name` on (True) or off (False) from the next optimizer step on, in this process."""
    if value:
        _off.discard(name)
    else:
        _off.add(name)
    for listener in _listeners.get(name, ()):
        listener(value)


def listen(name: str, listener: Callable[[bool], None]) -> None:
    """Have `switch(name, value)` call `listener(value)`: for a lever that acts through a setting, not a code path."""
    _listeners.setdefault(name, []).append(listener)


ENV = "SHARDLAB_AB"
BLOCK = 4  # optimizer steps a side runs before the other takes over
WARMUP = 5  # optimizer steps first, the lever as the run has it (on), counted on neither side


def parse(value: str) -> tuple[str, int]:
    """SHARDLAB_AB's value, LEVER or LEVER:BLOCK, as (lever, block); a UserError in the user's terms where it is neither."""
    from shardlab.core.errors import UserError

    name, _, block = value.strip().partition(":")
    if not name or (block and not (block.isdigit() and int(block) >= 2)):
        raise UserError(f"{ENV}={value}: give a lever and, optionally, its block of steps (a whole number >= 2), e.g. "
                        f"{ENV}=no-fetch-sync or {ENV}=no-fetch-sync:{BLOCK}; or unset {ENV}")
    return name, int(block) if block else BLOCK


def check(value: str, strategy: str, switchable: tuple[str, ...], experiments: tuple[str, ...], max_steps: int) -> None:
    """Refuse an A/B this run cannot make, before any process starts: a lever the strategy cannot switch, one the run
    does not have on, or too few steps for two blocks on each side."""
    from shardlab.core.errors import UserError

    name, block = parse(value)
    if name not in switchable:
        can = f"can switch {', '.join(switchable)}" if switchable else "has no lever that switches"
        raise UserError(f"{ENV}={value}: strategy '{strategy}' {can} between steps (`recipe strategies` lists its "
                        f"levers); name one of those, or unset {ENV}")
    if name not in experiments:
        have = ",".join(experiments) or "none"
        raise UserError(f"{ENV}={value}: this run does not have {name} on (its experiments: {have}); add it, e.g. "
                        f"--experiments {','.join([*experiments, name])}")
    if max_steps < WARMUP + 4 * block:
        raise UserError(f"{ENV}={value}: two blocks of {block} steps on each side after {WARMUP} warm-up steps need "
                        f"--max-steps {WARMUP + 4 * block} or more (this run: {max_steps})")
