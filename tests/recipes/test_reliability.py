"""Reliability: resume after kill -9 with the uninterrupted run's losses, a dead rank ends the job fast
with its name and cause, out-of-memory advice. Real 2-process CPU runs; faults come from a test plug-in
package (a real dist-info with an entry point), never from mocks."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from shardlab.recipes.checkpoint import step_dirs
from tests.conftest import LLAMA3, rel_diff

CPU = ("--accelerator", "cpu", "--devices", "2")
# mb 16 at seq 128 on the shipped corpus: ~44 steps per epoch (the faults below strike long before step 60)
BASE = (*CPU, "--micro-batch-size", "16", "--no-export", "--metrics", "none")
SHAPE = (*BASE, "--max-steps", "60")


def _env(cache_dir, pythonpath: str | None = None) -> dict:
    env = {**os.environ, "SHARDLAB_CACHE": str(cache_dir), "PYTHONUNBUFFERED": "1"}
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [pythonpath, env.get("PYTHONPATH")]))
    return env


def _start(cache_dir, *args, pythonpath=None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "shardlab.recipes.cli", *map(str, args)], env=_env(cache_dir, pythonpath),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _tree(pid: int) -> list[int]:
    """pid and all its descendants (the ranks run in sessions of their own)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def _rank_pid(root: int, rank: int) -> int | None:
    for pid in _tree(root):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in env and b"SHARDLAB_LOCAL_RANKS=1" in env:
            return pid
    return None


def _wait_for(pred, proc: subprocess.Popen, timeout: float = 300) -> None:
    t0 = time.time()
    while not pred():
        assert proc.poll() is None, "the run ended before the event: " + proc.communicate()[1][-2000:]
        assert time.time() - t0 < timeout, "timed out waiting"
        time.sleep(0.05)


# kill -9 under the two backends whose checkpoints are many files written by every rank (DeepSpeed's shards, FSDP2's
# distributed checkpoint), on the tied Llama-3 shape: the uninterrupted run is test_parity.py's (LLAMA3, checkpoints
# at step 2), and both formats must hold the shared matrix once. Resume under ddp: the test after this one; under
# zero2, with gradient accumulation and across an epoch: test_checkpoints_keep_the_last_k_and_zero2_resumes_...
@pytest.mark.parametrize("strategy", ["zero3", "fsdp"])
def test_kill_9_then_resume_gives_the_uninterrupted_losses(strategy, train, cache_dir, recipe, tmp_path):
    reference = train(strategy, *LLAMA3)
    out = tmp_path / "run"
    proc = _start(cache_dir, "run", "--strategy", strategy, "--output", out, *CPU, *LLAMA3)
    _wait_for(lambda: step_dirs(out / "checkpoints"), proc)
    for pid in _tree(proc.pid):  # the whole job, as a preemption would
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.communicate()
    assert not (out / "summary.json").exists(), "killed too late: the run had finished"
    killed_at = int(step_dirs(out / "checkpoints")[-1].name.split("-")[1])
    # what a write killed half-way leaves behind is never taken for the latest
    (out / "checkpoints" / ".step-000990.tmp").mkdir()
    (out / "checkpoints" / ".step-000990.tmp" / "state").write_text("half")

    resumed = recipe("run", "--strategy", strategy, "--output", out, "--resume", *CPU, *LLAMA3)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["resumed_from"].endswith(f"step-{killed_at:06d}") and killed_at == 2
    assert len(summary["losses"]) == 3  # steps before the kill come from the checkpoint
    assert summary["losses"][:killed_at] == reference["losses"][:killed_at]
    assert rel_diff(summary["losses"][killed_at:], reference["losses"][killed_at:]) <= 1e-5
    # validation losses too (LLAMA3 validates at step 2, before its checkpoint, and 3): step 2's from the checkpoint
    val, ref_val = summary["val_losses"], reference["val_losses"]
    assert [v["step"] for v in val] == [2, 3] and val[0] == ref_val[0]
    assert rel_diff([v["loss"] for v in val], [v["loss"] for v in ref_val]) <= 1e-5


def test_ddp_resumes_with_the_uninterrupted_losses(train, recipe, tmp_path):
    kept = train.checkpoints("ddp", *LLAMA3)  # first: where the run is made again, its losses are these
    full = train("ddp", *LLAMA3)
    resumed = recipe("run", "--strategy", "ddp", "--output", tmp_path / "r", *CPU, *LLAMA3,
                     "--resume", kept / "step-000002")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    losses = summary["losses"]
    assert losses[:2] == full["losses"][:2] and rel_diff(losses[2:], full["losses"][2:]) <= 1e-5
    assert summary["val_losses"][0] == full["val_losses"][0]  # step 2's, from the checkpoint
    assert rel_diff([v["loss"] for v in summary["val_losses"]], [v["loss"] for v in full["val_losses"]]) <= 1e-5


def test_checkpoints_keep_the_last_k_and_zero2_resumes_under_accumulation_across_an_epoch(
        train, recipe, short_corpus, tmp_path):
    # on the short corpus (tests/conftest.py) an epoch is 5 steps of micro-batch 4 x accumulation 2 x 2 ranks:
    # resumed at step 9, the run goes on into the third epoch
    flags = (*CPU, "--micro-batch-size", "4", "--grad-accum", "2", "--data", str(short_corpus), "--no-export",
             "--metrics", "none", "--max-steps", "12", "--checkpoint-every", "3", "--keep-checkpoints", "2")
    s, kept = train("zero2", *flags), train.checkpoints("zero2", *flags)
    assert [p.name for p in step_dirs(kept)] == ["step-000009", "step-000012"]
    assert not [p for p in kept.iterdir() if p.name.startswith(".")]
    resumed = recipe("run", "--strategy", "zero2", "--output", tmp_path / "r", *flags, "--resume", kept / "step-000009")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    losses = json.loads((tmp_path / "r" / "summary.json").read_text())["losses"]
    assert len(losses) == 12 and losses[:9] == s["losses"][:9]  # steps before the checkpoint come from it
    assert rel_diff(losses[9:], s["losses"][9:]) <= 1e-5


def test_a_killed_rank_ends_the_job_within_60_s_naming_it(cache_dir, tmp_path):
    # under zero3 (DeepSpeed's collectives); the launcher's watch is the same for every strategy
    out = tmp_path / "run"
    proc = _start(cache_dir, "run", "--strategy", "zero3", "--output", out, "--checkpoint-every", "2", *BASE,
                  "--max-steps", "100000")
    _wait_for(lambda: step_dirs(out / "checkpoints"), proc)  # training is under way
    victim = _rank_pid(proc.pid, 1)
    assert victim
    os.kill(victim, signal.SIGKILL)
    t0 = time.time()
    _, err = proc.communicate(timeout=90)
    assert time.time() - t0 < 60
    assert proc.returncode == 1
    last = err.strip().splitlines()[-1]
    assert last.startswith("recipe: error: rank 1 of 2 failed: killed by SIGKILL"), last
    assert not _rank_pid(proc.pid, 0)


FAULTS = '''
    import os

    import torch

    from shardlab.core.registry import Preset
    from shardlab.core.strategy import Capabilities
    from shardlab.strategies.ddp import DDP


    class _Fault(DDP):
        """DDP whose third forward pass fails: on rank 1 with an exception, or on every rank out of memory."""

        oom = False

        def build_model(self, source, module, ctx):
            model = super().build_model(source, module, ctx)
            calls = []

            def hook(mod, args):
                calls.append(1)
                if len(calls) == 3 and self.oom:
                    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB (test plug-in)")
                if len(calls) == 3 and os.environ.get("RANK") == "1":
                    raise ValueError("injected fault in the forward pass of rank 1")

            model.register_forward_pre_hook(hook)
            return model


    class Oom(_Fault):
        oom = True


    class BadExport(DDP):
        """Exports weights that are not the trained ones (as a broken backend would)."""

        def full_state_dict(self, model):
            state = super().full_state_dict(model)
            if state is not None:
                state["lm_head.weight"] = state["lm_head.weight"] + 1.0
            return state


    def presets():
        return [Preset(name="ddp_fault", strategy_cls=_Fault, family="ddp_fault", description="test: rank 1 raises",
                       capabilities=Capabilities()),
                Preset(name="ddp_oom", strategy_cls=Oom, family="ddp_oom", description="test: out of memory",
                       capabilities=Capabilities()),
                Preset(name="ddp_badexport", strategy_cls=BadExport, family="ddp_badexport",
                       description="test: exports wrong weights", capabilities=Capabilities())]
'''


@pytest.fixture(scope="module")
def faults_path(tmp_path_factory) -> str:
    site = tmp_path_factory.mktemp("faults-site")
    info = site / "shardlab_test_faults-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: shardlab-test-faults\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[shardlab.strategies]\nfaults = shardlab_test_faults:presets\n")
    (site / "shardlab_test_faults.py").write_text(textwrap.dedent(FAULTS))
    return str(site)


def test_an_exception_on_one_rank_ends_the_job_naming_rank_and_cause(recipe, faults_path, tmp_path):
    t0 = time.time()
    proc = recipe("run", "--strategy", "ddp_fault", "--output", tmp_path / "run", *SHAPE, pythonpath=faults_path)
    assert time.time() - t0 < 120 and proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last == ("recipe: error: rank 1 of 2 failed: ValueError: injected fault in the forward pass of rank 1; "
                    "shardlab stopped the other rank(s)"), last
    assert not (tmp_path / "run" / "summary.json").exists()


def test_out_of_memory_says_what_plan_would_choose(recipe, faults_path, tmp_path):
    proc = recipe("run", "--strategy", "ddp_oom", "--output", tmp_path / "run", *SHAPE, pythonpath=faults_path)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert "out of GPU memory under ddp_oom (estimated" in last and "recipe plan would choose" in last, last
    assert "Traceback" not in last


def test_a_failed_export_check_fails_the_run_and_leaves_no_export(recipe, faults_path, tmp_path):
    out = tmp_path / "run"
    proc = recipe("run", "--strategy", "ddp_badexport", "--output", out, "--accelerator", "cpu", "--devices", "2",
                  "--max-steps", "2", pythonpath=faults_path)
    assert proc.returncode == 1
    assert "hf export: reloaded logits differ" in proc.stderr.strip().splitlines()[-1]
    assert not (out / "hf").exists() and not list(out.glob(".hf.tmp-*")) and not (out / "summary.json").exists()
