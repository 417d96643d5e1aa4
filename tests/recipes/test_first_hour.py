"""What a new user meets in the first hour (issue 22, items 3 and 9): each refusal one line naming the flag and the
fix, exit code 2, nothing started or written; plan's sizes and the strategies table read without a manual."""
from __future__ import annotations

import argparse

import pytest


def _one_error(rc: int, err: str) -> str:
    lines = [l for l in err.splitlines() if l.startswith("recipe: error:")]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, (rc, err[-2000:])
    return lines[0]


@pytest.mark.parametrize("command", [("run",), ("compare", "--strategies", "ddp,fsdp")])
@pytest.mark.parametrize("below", [False, True])
def test_output_that_is_a_file_is_refused_before_anything_starts(in_process, tmp_path, command, below):
    file = tmp_path / "notes.txt"
    file.write_text("mine\n")
    output = file / "run" if below else file
    rc, _, err = in_process(*command, "--accelerator", "cpu", "--output", output)
    line = _one_error(rc, err)
    assert f"--output {output}: " in line and "is a file, not a folder" in line, line
    assert not below or f"{file} is a file" in line, line
    assert file.read_text() == "mine\n" and [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_a_file_as_the_model_says_it_is_a_file_and_what_to_give(in_process, tmp_path):
    (tmp_path / "notamodel.txt").write_text("hello\n")
    for command in ("run", "plan"):
        rc, _, err = in_process(command, "--accelerator", "cpu", "--model", tmp_path / "notamodel.txt",
                                "--output", tmp_path / "out")
        line = _one_error(rc, err)
        assert "is a file, not a model folder or config.json" in line and "`recipe models`" in line, line
        assert "Hugging Face Llama folder (config.json, *.safetensors, tokenizer)" in line, line
    assert not (tmp_path / "out").exists()


def test_a_yaml_typo_names_the_file_and_the_field_it_meant(in_process, tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("strategy: ddp\nmax_stpes: 5\n")
    rc, _, err = in_process("run", "--config", config, "--accelerator", "cpu", "--output", tmp_path / "out")
    line = _one_error(rc, err)
    assert f"--max-stpes: unknown field (max_stpes in --config {config}); did you mean max_steps (--max-steps)?" in line, line
    config.write_text("colour: red\n")  # nothing close: the known fields
    line = _one_error(*in_process("run", "--config", config, "--accelerator", "cpu")[::2])
    assert f"--colour: unknown field (colour in --config {config}); known: strategy, offload" in line, line


def test_plan_shows_a_tiny_model_in_mib(in_process):
    rc, out, err = in_process("plan", "--accelerator", "cpu", "--model", "tiny")
    assert rc == 0, err
    rows = {l.split()[0]: l for l in out.splitlines() if l.startswith(("ddp ", "fsdp "))}
    assert "MiB" in rows["ddp"] and "MiB" in rows["fsdp"] and "0.0 GiB" not in out, out
    assert "fsdp is estimated at " in out and " MiB per rank" in out, out


def test_strategies_table_has_column_headers(in_process):
    rc, out, _ = in_process("strategies")
    lines = out.splitlines()
    assert rc == 0 and lines[0] == "built-in:"
    assert lines[1].split() == ["preset", "offload", "shards", "description"], lines[1]
    assert lines[2].split()[0] == "ddp" and lines[2].index("none") == lines[1].index("offload"), lines[:3]


def test_run_refuses_the_slurm_launcher_pointing_at_launch(in_process, tmp_path):
    rc, _, err = in_process("run", "--launcher", "slurm", "--accelerator", "cpu", "--output", tmp_path / "out")
    line = _one_error(rc, err)
    assert line.startswith("recipe: error: --launcher slurm: ") and "`recipe launch --launcher slurm`" in line, line
    assert not (tmp_path / "out").exists()


def test_run_help_lists_the_choices_of_each_literal_field():
    from shardlab.recipes import run

    parser = argparse.ArgumentParser(prog="recipe run")
    run.add_arguments(parser)
    text = parser.format_help()
    for shown in ("--offload {optimizer,all}", "--accelerator {cpu,gpu,auto}", "--kernels {torch,liger}",
                  "--precision {auto,32-true,bf16-mixed,bf16-true,16-mixed}", "--devices N|auto",
                  "--micro-batch-size N|auto", "--launcher {torchrun,slurm}"):
        assert shown in text, shown
