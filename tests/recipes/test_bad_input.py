"""Bad input: one line naming the flag and the fix, exit code 2, no traceback, nothing in --output."""
from __future__ import annotations

import json

import pytest


def _cases(tmp):
    (tmp / "notllama").mkdir()
    (tmp / "notllama" / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    (tmp / "noweights").mkdir()
    (tmp / "noweights" / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (tmp / "empty").mkdir()
    (tmp / "blank.txt").write_text("   \n")
    (tmp / "bad.jsonl").write_text('{"text": "ok"}\nnot json\n')
    (tmp / "bad.yaml").write_text("a: [\n")
    (tmp / "unknown.yaml").write_text("colour: red\n")
    return {
        "unknown strategy": (["--strategy", "zero4"], "known: ddp"),
        "missing model folder": (["--model", tmp / "nope"], "--model"),
        "not a llama folder": (["--model", tmp / "notllama"], "model_type is 'gpt2'"),
        "llama folder without weights": (["--model", tmp / "noweights"], "no weight files"),
        "data folder without text files": (["--data", tmp / "empty"], "no .txt, .md or .jsonl"),
        "data with no text": (["--data", tmp / "blank.txt"], "hold no text"),
        "corrupt jsonl": (["--data", tmp / "bad.jsonl"], "line 2 is not JSON"),
        "missing data": (["--data", tmp / "nope.txt"], "no such file"),
        "zero devices": (["--devices", "0"], "--devices"),
        "fp16 on cpu": (["--precision", "16-mixed"], "fp16 training needs a GPU"),
        "unknown precision": (["--precision", "fp8"], "--precision"),
        "offload without one": (["--strategy", "ddp", "--offload", "optimizer"], "no such CPU offload"),
        "gpu without gpu": (["--accelerator", "gpu"], "no CUDA GPU"),
        "sequence too long": (["--seq-len", "4096"], "at most 2048"),
        "too little data": (["--micro-batch-size", "5000"], "one step needs"),
        "negative lr": (["--lr", "-1"], "--lr"),
        "not an int": (["--max-steps", "many"], "--max-steps"),
        "malformed yaml": (["--config", tmp / "bad.yaml"], "not valid YAML"),
        "unknown yaml field": (["--config", tmp / "unknown.yaml"], "--colour: unknown field"),
        "missing yaml": (["--config", tmp / "nope.yaml"], "no such file"),
        "unknown flag": (["--colour", "red"], "unrecognized arguments"),
    }


def test_bad_run_inputs(recipe, tmp_path):
    failures = []
    for name, (flags, expected) in _cases(tmp_path).items():
        out = tmp_path / ("out-" + name.replace(" ", "-"))
        proc = recipe("run", "--accelerator", "cpu", "--output", out, *flags) if "--accelerator" not in flags \
            else recipe("run", "--output", out, *flags)
        lines = [l for l in proc.stderr.splitlines() if l.startswith("recipe: error:")]
        ok = (proc.returncode == 2 and len(lines) == 1 and expected in lines[0]
              and "Traceback" not in proc.stderr and not out.exists())
        if not ok:
            failures.append(f"{name}: rc={proc.returncode} stderr={proc.stderr[-400:]!r}")
    assert not failures, "\n".join(failures)


def test_unknown_subcommand(recipe):
    proc = recipe("fly")
    assert proc.returncode == 2 and proc.stderr.startswith("recipe: error:")
