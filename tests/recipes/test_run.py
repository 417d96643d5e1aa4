"""End to end: the embedded default, a local HF folder with JSONL data, shipped YAML configs."""
from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path

import pytest
import torch
import yaml
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

from shardlab.core.config import RunConfig
from shardlab.recipes.model import byte_tokenizer
from shardlab.recipes.run import prepare

SUMMARY_KEYS = {"strategy", "world_size", "precision", "losses", "tokens_per_s", "peak_memory_bytes", "wall_s", "hf_export"}


def test_default_run_trains_and_exports(default_run):
    # `recipe run` with no model/data flags: tiny Llama on the shipped corpus, 2 CPU processes (tests/conftest.py; it
    # is test_parity.py's fp32 ddp run too)
    s, out = default_run, Path(default_run["output"])
    assert SUMMARY_KEYS <= set(s)
    assert s["strategy"] == "ddp" and s["world_size"] == 2 and len(s["losses"]) == 50
    assert s["losses"][-1] < s["losses"][0] - 1.0  # the loss falls
    assert len(s["peak_memory_bytes"]) == 2 and s["tokens_per_s"] > 0
    assert s["peak_requested_bytes"] is None and s["config"]["expandable_segments"] is False  # CUDA's allocator only
    # each of the 2 ranks computes with its share of this machine's cores, unless OMP_NUM_THREADS says otherwise
    assert s["cpu_threads"] == int(os.environ.get("OMP_NUM_THREADS") or max(1, len(os.sched_getaffinity(0)) // 2))
    model = AutoModelForCausalLM.from_pretrained(s["hf_export"])
    assert model.config.model_type == "llama"
    assert sorted(p.name for p in out.iterdir()) == ["hf", "logs", "resolved.json", "summary.json"]
    assert len((out / "logs" / "csv" / "metrics.csv").read_text().splitlines()) == 51  # header + 50 steps


def _llama_folder(path: Path) -> Path:
    cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=300, max_position_embeddings=256)
    LlamaForCausalLM(cfg).save_pretrained(path)
    byte_tokenizer().save_pretrained(path)
    return path


def test_local_folder_and_jsonl(recipe, tmp_path):
    folder = _llama_folder(tmp_path / "my-llama")
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(json.dumps({"text": f"Record {i}: the quick brown fox jumps over the lazy dog."})
                              for i in range(300)))
    proc = recipe("run", "--strategy", "zero3", "--accelerator", "cpu", "--devices", "2", "--model", folder,
                  "--data", data, "--seq-len", "64", "--max-steps", "3", "--output", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert s["model_folder"] == str(folder) and len(s["losses"]) == 3
    exported = AutoModelForCausalLM.from_pretrained(s["hf_export"])
    assert exported.config.hidden_size == 32 and exported.config.num_key_value_heads == 2


def _shipped_configs():
    return sorted((p for p in resources.files("shardlab.recipes").joinpath("configs").iterdir() if p.name.endswith(".yaml")),
                  key=lambda p: p.name)


@pytest.mark.parametrize("path", _shipped_configs(), ids=lambda p: p.name)
def test_shipped_yaml_is_valid_and_shows_its_command(path):
    text = path.read_text()
    assert text.startswith("# recipe run --config")
    RunConfig(**yaml.safe_load(text))


def test_tiny_cpu_yaml_is_the_default_run(cache_dir, monkeypatch):
    # tiny-cpu.yaml spells out the embedded default: the run `recipe run` does with no flags, which
    # test_default_run_trains_and_exports trains (so the next test does not train it again)
    monkeypatch.setenv("SHARDLAB_CACHE", str(cache_dir))
    path = next(p for p in _shipped_configs() if p.name == "tiny-cpu.yaml")
    spelled = prepare(RunConfig(**yaml.safe_load(path.read_text()))).run.config
    default = prepare(RunConfig()).run.config
    assert spelled.model_copy(update={"output": None}) == default.model_copy(update={"output": None})


@pytest.mark.parametrize("path", [p for p in _shipped_configs() if p.name != "tiny-cpu.yaml"], ids=lambda p: p.name)
def test_every_shipped_yaml_runs_a_few_steps(recipe, tmp_path, path):
    flags = ["--max-steps", "2", "--output", tmp_path / "o"]
    if yaml.safe_load(path.read_text()).get("accelerator") == "gpu" and not torch.cuda.is_available():
        # a GPU recipe on the CPU CI: same file and strategy, scaled to what CI has
        flags += ["--accelerator", "cpu", "--devices", "2", "--model", "tiny", "--precision", "32-true",
                  "--seq-len", "128", "--micro-batch-size", "2"]
    proc = recipe("run", "--config", path, *flags)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(json.loads((tmp_path / "o" / "summary.json").read_text())["losses"]) == 2
