"""Ctrl-C during `recipe run` (issue 22, item 2): one line naming the newest checkpoint, exit code 130, no traceback,
no rank left running, no half-written checkpoint."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from shardlab.recipes.checkpoint import step_dirs


def test_ctrl_c_is_one_line_naming_the_newest_checkpoint(cache_dir, tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "SHARDLAB_CACHE": str(cache_dir), "PYTHONUNBUFFERED": "1"}
    # its own session: the signal goes to its process group, as a terminal's Ctrl-C does
    proc = subprocess.Popen([sys.executable, "-m", "shardlab.recipes.cli", "run", "--accelerator", "cpu", "--devices", "2",
                             "--max-steps", "200", "--checkpoint-every", "2", "--output", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    launcher = psutil.Process(proc.pid)
    started = time.time()
    try:
        while not step_dirs(out / "checkpoints"):  # training is under way
            assert proc.poll() is None, "the run ended before its first checkpoint: " + proc.communicate()[1][-2000:]
            assert time.time() - started < 120, "no checkpoint within 120 s"
            time.sleep(0.1)
        ranks = launcher.children(recursive=True)
        assert ranks, "no rank processes"
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    lines = [l for l in err.splitlines() if l.startswith("recipe:")]
    newest = step_dirs(out / "checkpoints")[-1]
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err and "SignalException" not in err, err[-3000:]
    assert len(lines) == 1 and lines[0].startswith("recipe: interrupted at step "), err[-3000:]
    assert f"the newest checkpoint is {newest}; continue with the same command and --resume" in lines[0], lines
    _, alive = psutil.wait_procs(ranks, timeout=10)
    assert not alive, f"rank processes left running: {alive}"
    assert not list((out / "checkpoints").glob(".step-*.tmp")), "a half-written checkpoint was left"
    assert not (out / "summary.json").exists()
