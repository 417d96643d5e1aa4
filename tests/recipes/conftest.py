import json

import pytest

from shardlab.recipes.model import byte_tokenizer


@pytest.fixture(scope="module")
def tokenizer_folder(tmp_path_factory):
    """The byte-level tokenizer of the shipped test shapes, saved as a model folder's tokenizer."""
    folder = tmp_path_factory.mktemp("tokenizer")
    byte_tokenizer().save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def auto_run(recipe, tmp_path_factory) -> dict:
    """One `recipe run --strategy auto` on 2 CPU processes (2 steps, no export), under SHARDLAB_TRACE: test_resolved.py
    checks what its launcher resolved and prepared, test_plan.py what auto chose and ran.
    -> {"flags": its flags but --no-export, "proc", "trace": the trace file, "summary": summary.json}"""
    root = tmp_path_factory.mktemp("auto-run")
    flags = ("--strategy", "auto", "--accelerator", "cpu", "--devices", "2", "--max-steps", "2", "--output", root / "o")
    proc = recipe("run", *flags, "--no-export", env={"SHARDLAB_TRACE": str(root / "trace")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"flags": flags, "proc": proc, "trace": root / "trace",
            "summary": json.loads((root / "o" / "summary.json").read_text())}
