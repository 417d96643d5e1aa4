"""recipes/ranks.py in this process: how many CPU threads each local rank computes with (a 2-rank run's summary
records it: tests/recipes/test_run.py), and under `recipe launch`'s torchrun."""
from __future__ import annotations

import os

import pytest

from shardlab.recipes import ranks


@pytest.mark.parametrize("cores, nproc, expected", [
    (16, 1, None),  # one rank keeps torch's default: every core (one GPU, or a CPU run on one process)
    (16, 2, 8), (16, 8, 2), (2, 2, 1), (2, 4, 1),  # shared out, at least one each
])
def test_local_ranks_share_out_the_cores(monkeypatch, cores, nproc, expected):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
    assert ranks.rank_threads(nproc) == expected


def test_a_users_omp_num_threads_is_kept(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert ranks.rank_threads(2) is None


@pytest.mark.parametrize("launcher, devices, user, expected", [
    ("torchrun", 8, None, "2"),  # torchrun alone would give each of the 8 ranks one thread
    ("torchrun", 1, None, None),  # one rank: torch's default, every core
    ("torchrun", 8, "5", "5"),  # the user's setting stands
    ("slurm", 8, None, None),  # srun's tasks: their --cpus-per-task
])
def test_recipe_launch_shares_out_the_cores_under_torchrun(monkeypatch, launcher, devices, user, expected):
    from shardlab.core.config import load_config
    from shardlab.recipes.launch import launch_env

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    if user:
        monkeypatch.setenv("OMP_NUM_THREADS", user)
    else:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    cfg = load_config(None, {"launcher": launcher, "devices": devices, "num_nodes": 2, "accelerator": "cpu"})
    assert launch_env(cfg).get("OMP_NUM_THREADS") == expected
