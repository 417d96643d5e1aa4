"""The diagnostics a run takes from its environment, each off unless set (none changes what is trained):
- SHARDLAB_MEMORY_SNAPSHOT=PATH: the allocator's history at the peak (GPU runs; recipes/metrics.py MemorySnapshot);
- SHARDLAB_PROFILE=PATH, with SHARDLAB_PROFILE_PYTHON=1 the Python functions too: where steps 6..8 spend their time
  (recipes/profile.py);
- SHARDLAB_AB=LEVER[:BLOCK]: the lever off and on in alternating blocks of steps (recipes/lever_ab.py), checked before
  any process starts (`check`), reported in summary.json's `lever_ab` and on the run's last line.
Lightning is imported only by `callbacks`, so the launching process can `check` without it.
"""
from __future__ import annotations

import os
from typing import Optional

from shardlab.core import registry, switches


def check(strategy: str, experiments: tuple[str, ...], max_steps: int) -> None:
    """A bad SHARDLAB_AB as a UserError, before anything runs or is written."""
    if os.environ.get(switches.ENV):
        switches.check(os.environ[switches.ENV], strategy, registry.get(strategy).capabilities.switchable, experiments,
                       max_steps)


def callbacks(accelerator: str) -> list:
    """The Lightning callbacks of the diagnostics set in the environment."""
    found: list = []
    if os.environ.get("SHARDLAB_MEMORY_SNAPSHOT") and accelerator == "gpu":
        from shardlab.recipes.metrics import MemorySnapshot

        found.append(MemorySnapshot(os.environ["SHARDLAB_MEMORY_SNAPSHOT"]))
    if os.environ.get("SHARDLAB_PROFILE"):
        from shardlab.recipes.profile import StepProfile

        found.append(StepProfile(os.environ["SHARDLAB_PROFILE"], python=os.environ.get("SHARDLAB_PROFILE_PYTHON") == "1"))
    if os.environ.get(switches.ENV):
        from shardlab.recipes.lever_ab import LeverAB

        found.append(LeverAB(os.environ[switches.ENV]))
    return found


def lever_ab(found: list, step_s: list[float], tokens_per_step: int) -> Optional[dict]:
    """summary.json's `lever_ab`: the A/B's result where SHARDLAB_AB ran one, else None."""
    from shardlab.recipes.lever_ab import LeverAB

    ab = next((c for c in found if isinstance(c, LeverAB)), None)
    return ab.result(step_s, tokens_per_step) if ab else None
