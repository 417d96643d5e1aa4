"""Shared helpers: run the real `recipe` command in fresh processes (2 CPU ranks over gloo)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("shardlab-cache")


@pytest.fixture(scope="session")
def recipe(cache_dir):
    """recipe(*args) -> CompletedProcess; output captured, SHARDLAB_CACHE isolated per test session."""

    def run(*args: str, timeout: float = 600, pythonpath: str | None = None) -> subprocess.CompletedProcess:
        env = {**os.environ, "SHARDLAB_CACHE": str(cache_dir), "PYTHONUNBUFFERED": "1"}
        if pythonpath:  # put plug-in packages (real dist-info folders) on the path of the child processes
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [pythonpath, env.get("PYTHONPATH")]))
        return subprocess.run([sys.executable, "-m", "shardlab.recipes.cli", *map(str, args)],
                              capture_output=True, text=True, env=env, timeout=timeout)

    return run


@pytest.fixture(scope="session")
def train(recipe, tmp_path_factory):
    """train(strategy, *flags) -> summary dict of a finished run (cached per argument list)."""
    done: dict[tuple, dict] = {}

    def run(strategy: str, *flags: str) -> dict:
        key = (strategy, *flags)
        if key not in done:
            out = tmp_path_factory.mktemp(f"run-{strategy}")
            proc = recipe("run", "--strategy", strategy, "--accelerator", "cpu", "--devices", "2",
                          "--output", out, *flags)
            assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
            done[key] = json.loads((out / "summary.json").read_text()) | {"output": str(out)}
        return done[key]

    return run


def rel_diff(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b)
    return max(abs(x - y) / abs(y) for x, y in zip(a, b))
