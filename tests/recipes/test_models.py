"""Named Llama shapes: published parameter counts, the tiny test shapes, `recipe models`, planning from a config alone.

`recipe models` and `recipe plan` start no process: they run in this one (in_process, tests/conftest.py)."""
from __future__ import annotations

import json

import pytest

from shardlab.core import memory
from shardlab.recipes.model import ALIASES, SHAPES, SHIPPED, flops_per_token, model_config

# Unique parameters (a tied embedding once) of the published models, as their model cards and
# sum(p.numel() for p in model.parameters()) give them.
PUBLISHED = {
    "tinyllama-1.1b": 1_100_048_384,
    "llama-2-7b": 6_738_415_616,
    "llama-2-13b": 13_015_864_320,
    "llama-2-70b": 68_976_648_192,
    "llama-3.1-8b": 8_030_261_248,
    "llama-3.1-70b": 70_553_706_496,
    "llama-3.1-405b": 405_853_388_800,
    "llama-3.2-1b": 1_235_814_400,
    "llama-3.2-3b": 3_212_749_824,
}
PLAN = ("--accelerator", "gpu", "--gpus", "8", "--gpu-memory-gib", "80", "--cpu-memory-gib", "1024", "--json")


@pytest.mark.parametrize("name", PUBLISHED)
def test_published_parameter_count(name):
    s = memory.shape_of(model_config(name))
    assert s.params == PUBLISHED[name]
    assert s.tied == (name in ("llama-3.2-1b", "llama-3.2-3b"))


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shape_is_llama_and_flops_count_unique_parameters(name):
    cfg = model_config(name)
    assert SHAPES[name]["model_type"] == "llama" and (cfg.bos_token_id, cfg.eos_token_id, cfg.pad_token_id) == (0, 1, 1)
    assert flops_per_token(cfg, seq_len=0) == 6 * memory.shape_of(cfg).params  # 6N, N unique
    if name in ALIASES:  # an older name: same architecture as the shape it stands for
        assert memory.shape_of(cfg).params == memory.shape_of(model_config(ALIASES[name])).params


def test_context_lengths_and_rope():
    ctx = {n: model_config(n).max_position_embeddings for n in PUBLISHED}
    assert ctx["tinyllama-1.1b"] == 2048 and ctx["llama-2-70b"] == 4096 and ctx["llama-3.1-405b"] == ctx["llama-3.2-1b"] == 131072
    rope = {n: model_config(n).rope_parameters for n in ("llama-3.1-8b", "llama-3.2-3b")}
    assert rope["llama-3.1-8b"]["rope_type"] == "llama3" and rope["llama-3.1-8b"]["factor"] == 8.0
    assert rope["llama-3.2-3b"]["factor"] == 32.0 and rope["llama-3.2-3b"]["rope_theta"] == 500000.0


def test_tiny_llama3_is_tied_gqa_8_with_llama3_rope(cache_dir, monkeypatch):
    from transformers import LlamaForCausalLM

    from shardlab.recipes.model import initial_folder

    cfg = model_config("tiny-llama3")
    assert cfg.tie_word_embeddings and cfg.num_attention_heads // cfg.num_key_value_heads == 8
    assert cfg.vocab_size > 4 * cfg.hidden_size and cfg.rope_parameters["rope_type"] == "llama3"
    monkeypatch.setenv("SHARDLAB_CACHE", str(cache_dir))
    built = LlamaForCausalLM.from_pretrained(initial_folder("tiny-llama3", seed=0))  # the random weights run trains
    assert built.lm_head.weight is built.model.embed_tokens.weight
    assert sum(p.numel() for p in built.parameters()) == memory.shape_of(cfg).params


def test_recipe_models_lists_every_shape(in_process):
    rc, out, err = in_process("models", "--json")
    assert rc == 0, err
    rows = {r["name"]: r for r in json.loads(out)}
    assert set(rows) == set(SHIPPED)
    assert all(rows[n]["params"] == count for n, count in PUBLISHED.items())
    assert rows["llama-1b"]["alias_of"] == "tinyllama-1.1b" and rows["llama-3.2-1b"]["alias_of"] is None
    assert rows["tiny-llama3"]["tied"] and rows["tiny-llama3"]["kv_heads"] == 1 and rows["llama-3.1-8b"]["context"] == 131072
    rc, out, _ = in_process("models")  # the table
    assert rc == 0
    table = out.splitlines()
    assert table[0].split()[:3] == ["name", "params", "layers"] and "kv heads" in table[0]
    assert any(l.startswith("llama-3.2-3b") and "3,212,749,824" in l and "yes" in l for l in table)
    assert any(l.startswith("llama-70b") and l.endswith("alias of llama-2-70b") for l in table)


@pytest.mark.parametrize("form", ["folder", "file"])
def test_plan_from_a_config_alone(in_process, tmp_path, form):
    # a real config.json carries more than the shape: the published ids and dtype are read and ignored
    published = SHAPES["llama-3.2-1b"] | {"architectures": ["LlamaForCausalLM"], "bos_token_id": 128000,
                                          "eos_token_id": 128001, "torch_dtype": "bfloat16"}
    (tmp_path / "config.json").write_text(json.dumps(published))
    rc, out, err = in_process("plan", "--model", tmp_path if form == "folder" else tmp_path / "config.json", *PLAN)
    assert rc == 0, err
    model = json.loads(out)["model"]
    assert model["params"] == PUBLISHED["llama-3.2-1b"] and model["tied"] and model["kv_heads"] == 8


def test_plan_names_the_model_and_its_unique_parameters(in_process):
    rc, out, _ = in_process("plan", "--model", "llama-3.2-3b", *PLAN)
    assert rc == 0
    model = json.loads(out)["model"]
    assert model == {"name": "llama-3.2-3b", "params": 3_212_749_824, "layers": 28, "hidden": 3072, "heads": 24,
                     "kv_heads": 8, "intermediate": 8192, "vocab": 128256, "tied": True}
    rc, out, _ = in_process("plan", "--model", "llama-3.2-3b", *PLAN[:-1])
    assert rc == 0 and out.splitlines()[0] == "model: llama-3.2-3b, 3.21B parameters (tied embeddings)"
