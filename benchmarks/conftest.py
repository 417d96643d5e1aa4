"""Fixtures for the CPU benchmarks: `recipe` and the raw-Lightning baseline in fresh processes.

tests/conftest.py does not reach benchmarks/ (a conftest covers its own folder), so the `recipe`
fixture is repeated here in the same form: SHARDLAB_CACHE isolated per session, output captured.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

RAW_LIGHTNING = Path(__file__).with_name("raw_lightning.py")
_SPEED_ROWS: list[dict] = []  # filled by test_step_speed.py, printed at the end of the session


def _env(cache_dir: Path) -> dict[str, str]:
    return {**os.environ, "SHARDLAB_CACHE": str(cache_dir), "PYTHONUNBUFFERED": "1"}


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("shardlab-cache")


@pytest.fixture(scope="session")
def recipe(cache_dir):
    """recipe(*args) -> CompletedProcess of `python -m shardlab.recipes.cli ARGS`."""

    def run(*args, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "shardlab.recipes.cli", *map(str, args)],
                              capture_output=True, text=True, env=_env(cache_dir), timeout=timeout)

    return run


@pytest.fixture(scope="session")
def raw_lightning(cache_dir):
    """raw_lightning(strategy, *flags) -> CompletedProcess of benchmarks/raw_lightning.py."""

    def run(strategy: str, *flags, timeout: float = 600) -> subprocess.CompletedProcess:
        from shardlab.recipes.ranks import thread_env

        # Lightning's launcher leaves each rank every core; `recipe run` shares them out (recipes/ranks.py): the raw
        # side gets the same threads per rank, so that the ratio compares the steps, not the thread counts
        args = list(map(str, flags))
        env = {**_env(cache_dir), **thread_env(int(args[args.index("--devices") + 1]) if "--devices" in args else 2)}
        return subprocess.run([sys.executable, str(RAW_LIGHTNING), strategy, *map(str, flags)],
                              capture_output=True, text=True, env=env, timeout=timeout)

    return run


@pytest.fixture(scope="session")
def speed_rows() -> list[dict]:
    return _SPEED_ROWS


def pytest_terminal_summary(terminalreporter) -> None:
    if not _SPEED_ROWS:
        return
    tr = terminalreporter
    tr.section("shardlab vs raw Lightning: step time (CPU, 2 gloo processes, tiny, fp32)")
    tr.write_line(f"{'strategy':<9} {'shardlab tok/s':>15} {'raw tok/s':>10} {'ratio':>6} "
                  f"{'shardlab ms':>12} {'raw ms':>7} {'loss rel diff':>14}  {'raw Lightning strategy':<22} ratio per round")
    for r in sorted(_SPEED_ROWS, key=lambda r: r["strategy"]):
        tr.write_line(f"{r['strategy']:<9} {r['shardlab_tokens_per_s']:>15,.0f} {r['raw_tokens_per_s']:>10,.0f} "
                      f"{r['ratio']:>6.2f} {r['shardlab_median_step_ms']:>12.1f} {r['raw_median_step_ms']:>7.1f} "
                      f"{r['max_rel_loss_diff']:>14.1e}  {r['raw_lightning_strategy']:<22} "
                      + " ".join(f"{x:.2f}" for x in r["ratio_per_round"]))
    tr.write_line("ratio = shardlab tokens/s / raw Lightning tokens/s (median step after warm-up); "
                  "report only, no timing is asserted")
    tr.write_line(json.dumps(_SPEED_ROWS))
