"""Start-up (issue 22): argument errors, --help, `strategies` and `plan` answer in a fraction of a second, without
importing torch, Lightning, DeepSpeed or transformers; `plan --help` lists only the flags that change a plan."""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

import pytest

from shardlab.core import memory
from shardlab.core.config import RunConfig
from shardlab.recipes.model import LLAMA_DEFAULTS, SHAPES, SHIPPED, llama_fields

LIMIT_S = 1.5  # the goal, on the 2-core CI machine
HEAVY = ("torch", "lightning", "deepspeed", "transformers")
PLAN_GPUS = ("--gpus", "8", "--gpu-memory-gib", "80")  # GPUs elsewhere, memory given: nothing to probe here


@pytest.fixture(scope="module")
def config_only(tmp_path_factory):
    """A model folder holding only its config.json (what `recipe plan` needs; no weights, no tokenizer)."""
    folder = tmp_path_factory.mktemp("config-only")
    (folder / "config.json").write_text(json.dumps(SHAPES["llama-3.2-3b"]))
    return folder


COMMANDS = {
    "run: argument error": (["run", "--max-steps", "-5"], 2, "recipe: error: --max-steps"),
    "--help": (["--help"], 0, "strategies"),
    "strategies": (["strategies"], 0, "zero3_offload"),
    "plan: named model": (["plan", "--model", "llama-3.2-3b", *PLAN_GPUS], 0, "choice:"),
    "plan: config-only folder": (["plan", "--model", "CONFIG_ONLY", *PLAN_GPUS], 0, "choice:"),
}


@pytest.mark.parametrize("name", COMMANDS)
def test_command_answers_within_the_limit(name, benchmark, config_only, cache_dir):
    args, code, expected = COMMANDS[name]
    args = [str(config_only) if a == "CONFIG_ONLY" else a for a in args]
    env = {**os.environ, "SHARDLAB_CACHE": str(cache_dir)}
    walls: list[float] = []

    def once() -> subprocess.CompletedProcess:
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "shardlab.recipes.cli", *args], capture_output=True, text=True,
                              env=env, timeout=60)
        walls.append(time.perf_counter() - start)
        return proc

    proc = benchmark.pedantic(once, rounds=3, iterations=1, warmup_rounds=0)
    assert proc.returncode == code and expected in proc.stdout + proc.stderr, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert statistics.median(walls) < LIMIT_S, f"recipe {' '.join(args)}: {sorted(walls)} s"


def test_strategies_plan_and_argument_errors_import_no_backend(config_only, cache_dir):
    """In one fresh interpreter: the listing, both plans, a refused run flag and run's --help, then sys.modules."""
    code = f"""
import contextlib, io, json, sys
from shardlab.recipes import cli
rcs = []
for args in (["strategies", "--json"], ["plan", "--model", "llama-3.2-3b", *{list(PLAN_GPUS)!r}, "--json"],
             ["plan", "--model", {str(config_only)!r}, *{list(PLAN_GPUS)!r}], ["run", "--max-steps", "-5"],
             ["run", "--help"], ["plan", "--help"]):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            rcs.append(cli.main(args))
        except SystemExit as e:  # --help
            rcs.append(e.code)
print(json.dumps({{"rcs": rcs, "heavy": [m for m in {HEAVY!r} if m in sys.modules]}}))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "SHARDLAB_CACHE": str(cache_dir)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result == {"rcs": [0, 0, 0, 2, 0, 0], "heavy": []}


def test_plan_help_lists_only_the_flags_that_change_a_plan(capsys):
    from shardlab.recipes.plan import RUN_ONLY

    usage, _, rest = _help(capsys, "plan").partition("options:")
    options, _, epilog = rest.partition("Also accepted")
    listed = {line.split()[0].rstrip(",") for line in options.splitlines() if line.strip().startswith("--")}
    for flag in ("--resume", "--launcher", "--node-rank", "--master-addr", "--master-port", "--data", "--output",
                 "--checkpoint-every", "--keep-checkpoints", "--export", "--metrics", "--seed"):
        assert flag not in listed and flag not in usage, flag
        assert flag in epilog, flag  # said to be accepted, and where they are described
    for flag in ("--model", "--strategy", "--gpus", "--gpu-memory-gib", "--cpu-memory-gib", "--memory-headroom",
                 "--micro-batch-size", "--deepspeed-config", "--precision", "--json", "--show-config"):
        assert flag in listed, flag
    assert len(listed) == len(RunConfig.model_fields) - len(RUN_ONLY) + 3  # + --config, --json, --show-config


def test_run_help_lists_every_field(capsys):
    out = _help(capsys, "run")
    for name in RunConfig.model_fields:
        assert "--" + name.replace("_", "-") in out, name


def test_plan_takes_a_run_command_line_as_it_is(in_process, tmp_path):
    rc, out, err = in_process("plan", "--model", "tiny", "--accelerator", "cpu", "--data", tmp_path / "nope.txt",
                              "--resume", "--output", tmp_path / "o", "--launcher", "slurm", "--no-export")
    assert rc == 0 and "choice:" in out, err
    assert not (tmp_path / "o").exists()


def _help(capsys, command: str) -> str:
    from shardlab.recipes import cli

    capsys.readouterr()
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    return capsys.readouterr().out


# The count that `recipe plan` uses (core/memory.py, from the config's sizes) against a model built on the meta device.
VARIANTS = {"attention bias": {"attention_bias": True}, "mlp bias": {"mlp_bias": True},
            "untied": {"tie_word_embeddings": False}, "no head_dim": {"head_dim": None},
            "no kv heads": {"num_key_value_heads": None}, "odd head_dim": {"head_dim": 48}}


@pytest.mark.parametrize("name", [*SHIPPED, *(f"tiny-llama3, {v}" for v in VARIANTS)])
def test_shape_from_the_config_counts_what_transformers_builds(name, tmp_path):
    from transformers import LlamaConfig

    if name in SHIPPED:
        given, fields = SHIPPED[name], llama_fields(name)
    else:  # through a config.json, as `recipe plan --model DIR` reads it
        given = {**SHIPPED["tiny-llama3"], **VARIANTS[name.split(", ")[1]]}
        (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", **given}))
        fields = llama_fields(str(tmp_path))
    config = LlamaConfig(**given)
    built = _meta_shape(config)
    assert memory.shape_of(fields) == built and memory.shape_of(config) == built


def test_llama_defaults_are_transformers(tmp_path):
    from transformers import LlamaConfig

    minimal = {"hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2, "num_attention_heads": 4,
               "vocab_size": 300}
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", **minimal}))
    config, fields = LlamaConfig(**minimal), llama_fields(str(tmp_path))
    assert {k: fields[k] for k in LLAMA_DEFAULTS} == {k: getattr(config, k) for k in LLAMA_DEFAULTS}


def _meta_shape(config) -> memory.Shape:
    """What shardlab counted before issue 22: the model built on the meta device, parameters counted."""
    from accelerate import init_empty_weights
    from transformers import LlamaForCausalLM

    try:  # transformers >= 5
        from transformers.initialization import no_init_weights
    except ImportError:
        from transformers.modeling_utils import no_init_weights

    with init_empty_weights(), no_init_weights():
        model = LlamaForCausalLM(config)
    model.tie_weights()
    return memory.Shape(
        params=sum(p.numel() for p in model.parameters()),
        largest_layer_params=max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules()),
        decoder_layer_params=sum(p.numel() for p in model.model.layers[0].parameters()),
        hidden=config.hidden_size, layers=config.num_hidden_layers, heads=config.num_attention_heads,
        kv_heads=config.num_key_value_heads, intermediate=config.intermediate_size, vocab=config.vocab_size,
        tied=model.lm_head.weight is model.model.embed_tokens.weight, head_dim=config.head_dim)


def test_a_runs_launcher_imports_neither_lightning_nor_the_model_classes(cache_dir, tmp_path, monkeypatch):
    """The launching process of a 2-rank run (recipes/run.py prepare: resolve, check, find the data) imports neither
    Lightning, DeepSpeed nor the Llama model classes once the shape's initial weights and the tokenised data exist
    (a first run writes them, once): each rank imports them anyway, and each costs the launcher seconds before the
    ranks can start."""
    monkeypatch.setenv("SHARDLAB_CACHE", str(cache_dir))
    cfg = RunConfig(model="tiny-llama3", strategy="zero3", accelerator="cpu", devices=2, max_steps=2,
                    output=str(tmp_path / "out"))
    code = f"""
import json, sys
from shardlab.core.config import RunConfig
from shardlab.recipes.run import prepare
prepare(RunConfig.model_validate({cfg.model_dump()!r}))
print(json.dumps([m for m in ("lightning", "deepspeed", "transformers.models.llama.modeling_llama") if m in sys.modules]))
"""
    first, again = (subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
                    for _ in range(2))  # the first writes the initial weights and tokenised data, as a first run does
    assert first.returncode == 0 and again.returncode == 0, first.stderr[-3000:] + again.stderr[-3000:]
    assert json.loads(again.stdout.splitlines()[-1]) == []
