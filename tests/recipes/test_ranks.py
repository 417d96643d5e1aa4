"""recipes/ranks.py in this process: how many CPU threads each local rank computes with (a 2-rank run's summary
records it: tests/recipes/test_run.py)."""
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
