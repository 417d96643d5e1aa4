"""Shared helpers: the real `recipe` command in fresh processes (2 CPU ranks over gloo) or, where it starts no
process, in this one; the runs that several test files read (each trained once per session)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest


@pytest.fixture(scope="session", autouse=True)
def cpu_adam_built_beside_the_first_tests():
    """DeepSpeed compiles CPU Adam (the offload presets' optimizer) at its first use: about a minute of one core on a
    new machine. Compiled here in the background while the first, single-process tests run, the first offload run
    finds it (DeepSpeed's build lock makes a run that comes sooner wait for this build, then load it)."""
    from shardlab.strategies.deepspeed_console import cpu_adam_built

    if cpu_adam_built():
        yield
        return
    code = "from deepspeed.ops.op_builder import CPUAdamBuilder; CPUAdamBuilder().load(verbose=False)"
    build = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    yield
    build.wait(timeout=600)


@pytest.fixture(scope="module")
def module_folder(tmp_path_factory):
    """module_folder(name) -> a new folder for what one test file's tests share, removed once they are done. Kept to
    the end of the session, such folders (checkpoints of a 128k-vocabulary model, ~100 MB a copy) came to 10 of the
    session's 18 GB, more than a CI machine may have free (one ran out at 85% of the tests)."""
    made: list[Path] = []

    def make(name: str) -> Path:
        made.append(tmp_path_factory.mktemp(name))
        return made[-1]

    yield make
    for folder in made:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("shardlab-cache")


@pytest.fixture(scope="session")
def recipe(cache_dir):
    """recipe(*args) -> CompletedProcess; output captured, SHARDLAB_CACHE isolated per test session; env: variables
    added to this process's for the command (SHARDLAB_TRACE, SHARDLAB_AB), where several commands run at once."""

    def run(*args: str, timeout: float = 600, pythonpath: str | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        env = {**os.environ, "SHARDLAB_CACHE": str(cache_dir), "PYTHONUNBUFFERED": "1", **(env or {})}
        if pythonpath:  # put plug-in packages (real dist-info folders) on the path of the child processes
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [pythonpath, env.get("PYTHONPATH")]))
        return subprocess.run([sys.executable, "-m", "shardlab.recipes.cli", *map(str, args)],
                              capture_output=True, text=True, env=env, timeout=timeout)

    return run


# What a rank that died says about why (glibc's heap checks, C++ terminate, Python's fatal errors), wherever it is in
# stderr: the tail the assertion shows is often another rank's traceback about the lost peer (CI 2026-12-07e: fsdp_offload's
# rank 1 killed by SIGABRT at step 3, the reason cut off; not reproduced in 10 runs two at a time since).
DEATH = re.compile(r"terminate called|what\(\):|corrupted|double free|free\(\)|malloc|Fatal Python error|Segmentation fault|"
                   r"Aborted|core dumped|SIGABRT|SIGSEGV")


def died(proc: subprocess.CompletedProcess) -> str:
    lines = [line for line in proc.stderr.splitlines() if DEATH.search(line)]
    return ("a rank's death, from anywhere in stderr:\n" + "\n".join(lines[:20]) + "\n---\n") if lines else ""


@pytest.fixture(scope="session")
def train(recipe, tmp_path_factory):
    """train(strategy, *flags) -> summary dict of a finished run (cached per argument list), with "output" (its folder)
    and "log" (what it printed, stdout then stderr).

    train(strategy, *flags, env={...}): with env added to this process's variables (SHARDLAB_TRACE, SHARDLAB_AB). The
    cache key holds env: a run under SHARDLAB_AB trains otherwise, and a run wanting its own trace file gets its own run.

    train.many([(strategy, flags, env), ...]) -> their summaries, in that order: the runs not made yet start two at a
    time, each with env (or None) added to this process's variables. For one-rank runs (--devices 1), which leave one
    of CI's two cores idle: two at once take about the time of one.

    A run's checkpoints/ folder is removed when the test file that made it is done (runs_trimmed below; ~200 MB a
    run of the Llama-3 shape, 7 GB over a session): a test that reads a run's checkpoints takes the folder from
    train.checkpoints(strategy, *flags, env=...), which makes the run again where its checkpoints went."""
    done: dict[tuple, dict] = {}
    trimmed: set[tuple] = set()

    def made(args: tuple, out: Path, env: dict[str, str] | None) -> dict:
        proc = recipe("run", "--strategy", args[0], "--accelerator", "cpu", "--devices", "2", "--output", out, *args[1:],
                      env=env)
        assert proc.returncode == 0, died(proc) + proc.stdout[-3000:] + proc.stderr[-3000:]
        return json.loads((out / "summary.json").read_text()) | {"output": str(out), "log": proc.stdout + proc.stderr}

    def key(strategy: str, flags: tuple[str, ...], env: dict[str, str] | None) -> tuple:
        return (strategy, *flags, *sorted((env or {}).items()))

    def many(runs: list[tuple[str, tuple[str, ...], dict[str, str] | None]]) -> list[dict]:
        todo: dict[tuple, tuple[tuple, Path, dict[str, str] | None]] = {}
        for strategy, flags, env in runs:
            k = key(strategy, flags, env)
            if k not in done and k not in todo:
                todo[k] = ((strategy, *flags), tmp_path_factory.mktemp(f"run-{strategy}"), env)
        if todo:
            with ThreadPoolExecutor(max_workers=2) as pool:
                started = {k: pool.submit(made, args, out, env) for k, (args, out, env) in todo.items()}
            done.update({k: job.result() for k, job in started.items()})  # a failed run's assertion is raised here
        return [done[key(*r)] for r in runs]

    def run(strategy: str, *flags: str, env: dict[str, str] | None = None) -> dict:
        return many([(strategy, flags, env)])[0]

    def checkpoints(strategy: str, *flags: str, env: dict[str, str] | None = None) -> Path:
        k = key(strategy, flags, env)
        if k in trimmed:  # made again
            del done[k]
            trimmed.discard(k)
        return Path(run(strategy, *flags, env=env)["output"]) / "checkpoints"

    def trim() -> None:
        for k in done.keys() - trimmed:
            shutil.rmtree(Path(done[k]["output"]) / "checkpoints", ignore_errors=True)
            trimmed.add(k)

    run.many, run.checkpoints, run.trim = many, checkpoints, trim
    return run


@pytest.fixture(scope="module", autouse=True)
def runs_trimmed(train):
    """After each test file, the checkpoints of the runs train() made so far are removed (see train)."""
    yield
    train.trim()


@pytest.fixture(scope="session")
def default_run(recipe, tmp_path_factory) -> dict:
    """`recipe run` with no flags: the embedded default (ddp, tiny, fp32, 2 CPU processes, 50 steps at a constant
    learning rate). test_run.py checks it; test_parity.py's bf16 runs take its first 4 steps as ddp's fp32 losses (those
    of `--max-steps 4`, to the bit: nothing before step 5 depends on --max-steps). summary.json + "output"."""
    out = tmp_path_factory.mktemp("default-run") / "run"
    proc = recipe("run", "--output", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((out / "summary.json").read_text()) | {"output": str(out)}


@pytest.fixture
def in_process(cache_dir, capsys, monkeypatch):
    """in_process(*args) -> (exit code, stdout, stderr) of `recipe ARGS` run by cli.main in this process (what the
    `recipe` script calls): for what starts no process (plan, export-config, launch --print, strategies, models,
    doctor, refusals), the same checks without an interpreter start-up (~8 s) each. SHARDLAB_CACHE as `recipe`'s."""
    from shardlab.recipes import cli

    monkeypatch.setenv("SHARDLAB_CACHE", str(cache_dir))

    def run(*args) -> tuple[int, str, str]:
        capsys.readouterr()  # only this command's output
        rc = cli.main([str(a) for a in args])
        out = capsys.readouterr()
        return rc, out.out, out.err

    return run


@pytest.fixture(scope="session")
def short_corpus(tmp_path_factory) -> Path:
    """The shipped corpus cut to 88 blocks of 128 tokens: at 16 blocks per optimizer step (micro-batch 4 x
    accumulation 2 x 2 ranks) an epoch is 5 whole steps and a tail of one micro-batch per rank."""
    from shardlab.recipes import data
    from shardlab.recipes.model import byte_tokenizer

    path = tmp_path_factory.mktemp("short-corpus") / "short.txt"
    path.write_text(data.embedded_corpus()[:11_300], encoding="utf-8")
    assert len(data.token_blocks([path.read_text(encoding="utf-8")], byte_tokenizer(), 128)) == 88
    return path


# Chat data: 400 conversations of arithmetic (examples/chat/arithmetic.jsonl; 82 with a system turn, 44 with a second
# question: at 64 tokens the first are left out, no answer starting within them, the others cut). The Llama-3 runs
# below train on it.
CHAT_DATA = Path(__file__).resolve().parents[1] / "examples" / "chat" / "arithmetic.jsonl"

# Llama 3.x at tiny scale: tied embeddings, a 128,256-token vocabulary, rope_scaling llama3, 8 query heads per KV
# head, on the chat data (trained on the assistant's tokens only; the two-question conversations cut to 64 tokens),
# a twentieth of its blocks held out and validated on after step 2 (then the checkpoint) and after the last. test_parity.py trains it under every preset
# (train() keeps each run); test_reliability.py kills and resumes those runs; test_bad_input.py resumes from the ddp
# run's checkpoint.
LLAMA3 = ("--model", "tiny-llama3", "--max-steps", "3", "--micro-batch-size", "2", "--seq-len", "64",
          "--checkpoint-every", "2", "--data", str(CHAT_DATA), "--val-split", "0.05", "--val-every", "2")


FAMILIES = ("ddp", "zero2", "zero3", "fsdp")


@pytest.fixture(scope="session")
def four_families(recipe, short_corpus, tmp_path_factory) -> dict:
    """One `recipe compare` of ddp, zero2, zero3 and fsdp (tiny, fp32, 2 CPU ranks) that checks several things at once.

    6 steps of AdamW (beta2 0.99, weight decay 0.01), 2 warm-up steps then cosine decay, gradient accumulation 2 with
    clipping, on the short corpus: step 6 starts the second epoch (the first epoch's tail, one micro-batch per rank,
    is left out under every strategy), with CSV and TensorBoard metrics. test_compare.py checks its verdict and report,
    test_training_options.py its schedule and metrics files; its runs are each family's one-node fp32 reference for
    test_parity.py, test_launch.py and test_deepspeed_config.py, which run with its "flags": each is the run `recipe
    run --strategy NAME --accelerator cpu --devices 2 FLAGS` does (compare resolves every run from the same flags,
    and at fp32 aligns nothing).
    -> {"flags": FLAGS, "output": folder, "metrics": metrics.json, "runs": {name: summary.json + "output"}}"""
    flags = ("--max-steps", "6", "--warmup-steps", "2", "--lr-schedule", "cosine", "--adam-beta2", "0.99",
             "--weight-decay", "0.01", "--grad-accum", "2", "--grad-clip", "1.0", "--data", str(short_corpus),
             "--metrics", "both")
    out = tmp_path_factory.mktemp("four-families")
    proc = recipe("compare", "--strategies", ",".join(FAMILIES), "--accelerator", "cpu", "--devices", "2", *flags,
                  "--output", out)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["precision"] == "32-true" and metrics["alignment_notes"][0].startswith("nothing to align"), metrics
    runs = {n: json.loads((out / "runs" / n / "summary.json").read_text()) | {"output": str(out / "runs" / n)}
            for n in FAMILIES}
    return {"flags": flags, "output": out, "metrics": metrics, "runs": runs}


def rel_diff(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b)
    return max(abs(x - y) / abs(y) for x, y in zip(a, b))
