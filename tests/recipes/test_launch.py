"""`recipe launch`: a real two-node run as two launches on 127.0.0.1, one CPU process each."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from tests.conftest import rel_diff


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_node_loopback_matches_one_node(cache_dir, four_families, tmp_path):
    # under zero3, whose parameters are partitioned across the nodes; the launch itself is the same for every strategy
    strategy, port, out = "zero3", _free_port(), tmp_path / "run"
    env = {**os.environ, "SHARDLAB_CACHE": str(cache_dir)}
    nodes = [subprocess.Popen([sys.executable, "-m", "shardlab.recipes.cli", "launch", "--num-nodes", "2",
                               "--node-rank", str(r), "--devices", "1", "--master-addr", "127.0.0.1",
                               "--master-port", str(port), "--accelerator", "cpu", "--strategy", strategy,
                               *four_families["flags"], "--output", str(out)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env) for r in (0, 1)]
    logs = [n.communicate(timeout=600)[0] for n in nodes]
    assert [n.returncode for n in nodes] == [0, 0], logs[0][-2000:] + logs[1][-2000:]
    s = json.loads((out / "summary.json").read_text())
    assert s["world_size"] == 2 and s["strategy"] == strategy
    # two nodes x one process = one node x two processes: same batches, same losses
    assert rel_diff(s["losses"], four_families["runs"][strategy]["losses"]) < 1e-5  # the shared one-node runs
    assert sum("summary" in log for log in logs) == 1  # only global rank 0 reports


# `recipe launch --print` and the refusals start no process: they run in this one (in_process, tests/conftest.py).

def test_print_shows_every_node_in_both_forms(in_process):
    rc, out, err = in_process("launch", "--print", "--num-nodes", "3", "--devices", "4", "--master-addr", "10.1.2.3",
                           "--master-port", "29500", "--strategy", "zero3", "--accelerator", "cpu")
    assert rc == 0, err
    for r in range(3):
        assert f"node {r}: torchrun --nnodes 3 --node-rank {r} --nproc-per-node 4" in out
        assert f"node {r}: accelerate launch --num_machines 3 --machine_rank {r} --num_processes 12" in out
    assert "srun --nodes 3 --ntasks-per-node 4" in out


@pytest.mark.parametrize("flags,env,expected", [
    (["--num-nodes", "2", "--node-rank", "2", "--master-port", "29500", "--master-addr", "h"], {}, "--node-rank 2: must be in [0, 2)"),
    (["--num-nodes", "2", "--node-rank=-1", "--master-port", "29500", "--master-addr", "h"], {}, "--node-rank: Input should be greater than or equal to 0"),
    (["--num-nodes", "2", "--node-rank", "0", "--master-addr", "h"], {}, "--master-port: give a free TCP port"),
    (["--num-nodes", "2", "--node-rank", "0", "--master-port", "70000", "--master-addr", "h"], {}, "--master-port: Input should be less than or equal to 65535"),
    (["--num-nodes", "2", "--node-rank", "0", "--master-port", "29500"], {}, "--master-addr"),
    (["--num-nodes", "2", "--node-rank", "0", "--master-port", "29500", "--master-addr", "h"], {"WORLD_SIZE": "3"},
     "= 2 processes, but the environment says 3"),
])
def test_bad_launches(in_process, tmp_path, monkeypatch, flags, env, expected):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    rc, _, err = in_process("launch", "--devices", "1", "--accelerator", "cpu", "--output", tmp_path / "o", *flags)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and expected in lines[0], err
    assert not (tmp_path / "o").exists()
