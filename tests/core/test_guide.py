"""The plug-in guide (docs/write-a-strategy.md) is a plug-in: its code blocks, written out as a package with a real
dist-info (as pip would install it), load through the `shardlab.strategies` entry point and get an estimate in
`recipe plan`. In this process: the registry's discovery is reset to see the new folder on sys.path."""
from __future__ import annotations

import json
import re
import sys
import tomllib
from pathlib import Path

import pytest
import torch

from shardlab.core import memory, registry
from shardlab.core.errors import UserError
from shardlab.core.strategy import RunContext

GUIDE = Path(__file__).parents[2] / "docs" / "write-a-strategy.md"


def _files(lang: str) -> dict[str, str]:
    """The guide's ```lang blocks that start with a `# path` line: path -> text (the blocks that are files)."""
    out = {}
    for block in re.findall(rf"^```{lang}\n(.*?)^```", GUIDE.read_text(), re.S | re.M):
        first = block.splitlines()[0]
        if re.fullmatch(r"# [\w./-]+", first):
            out[first[2:]] = block
    return out


@pytest.fixture
def guide_plugin(tmp_path, monkeypatch) -> dict:
    """The guide's package in tmp_path, installed as a dist-info folder on sys.path; the registry rediscovers."""
    project = tomllib.loads(_files("toml")["pyproject.toml"])["project"]
    modules = _files("python")
    assert modules, "the guide has no python block headed by its file path"
    site = tmp_path / "site"
    for path, text in modules.items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_text(text)
    info = site / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    points = project["entry-points"][registry.ENTRY_POINT_GROUP]
    (info / "entry_points.txt").write_text(f"[{registry.ENTRY_POINT_GROUP}]\n"
                                           + "".join(f"{k} = {v}\n" for k, v in points.items()))
    packages = {p.split("/")[0].removesuffix(".py") for p in modules}
    monkeypatch.syspath_prepend(str(site))
    for name, value in (("_PRESETS", {}), ("_BROKEN", {}), ("_discovered", False)):  # restored after the test
        monkeypatch.setattr(registry, name, value)
    yield {"dist": project["name"], "presets": list(points), "site": site}
    for name in [m for m in sys.modules if m.split(".")[0] in packages]:
        del sys.modules[name]


def test_the_guide_shows_a_whole_plugin_with_a_memory_model():
    text = "\n".join(_files("python").values())
    for needed in ("class ", "(Strategy)", "def lightning_strategy", "def precision_plan", "PrecisionPlan(",
                   "def full_state_dict", "def model_state_bytes", "ModelStates(", "def presets", "Preset("):
        assert needed in text, needed
    assert "ddp_lean" in _files("toml")["pyproject.toml"]


def test_the_guide_names_every_capability():
    """Each Capabilities field (experiments among them) is described in the guide, as `name` or capabilities.name."""
    from shardlab.core.strategy import Capabilities

    text = GUIDE.read_text()
    assert [f for f in Capabilities.model_fields if f"`{f}`" not in text and f"capabilities.{f}" not in text] == []
    assert "ctx.experiments" in text


def test_guide_plugin_is_listed_as_a_plugin(guide_plugin, in_process):
    rc, out, err = in_process("strategies", "--json")
    assert rc == 0, err
    rows = {r["name"]: r for r in json.loads(out)}
    assert not [r for r in rows.values() if "error" in r], rows
    for name in guide_plugin["presets"]:
        assert rows[name]["source"] == f"plugin:{guide_plugin['dist']}"


def test_guide_plugin_has_an_estimate_in_plan(guide_plugin, in_process):
    flags = ("plan", "--model", "llama-7b", "--accelerator", "gpu", "--gpus", "8", "--gpu-memory-gib", "80",
             "--cpu-memory-gib", "1024")
    rc, out, err = in_process(*flags, "--json")
    assert rc == 0, err
    plan = json.loads(out)
    rows = {r["name"]: r for r in plan["strategies"]}
    lean, ddp = rows["ddp_lean"], rows["ddp"]
    assert lean["gpu_bytes"] is not None and lean["source"] == "plugin:shardlab-ddp-lean"
    # the guide's model: ddp's states less the bucket copy of the gradients (4 bytes per parameter under bf16-mixed),
    # plus the default fixed overhead that ddp's measurement set to 0. The peak is the forward's, where ddp has freed its
    # gradients since the last step and the bucket views hold none: the two differ by the overhead alone
    assert lean["gpu_bytes"] == ddp["gpu_bytes"] + memory.FIXED_OVERHEAD_BYTES
    rc, out, err = in_process(*flags)
    line = next(l for l in out.splitlines() if l.startswith("ddp_lean"))
    assert rc == 0 and "GiB" in line and "no estimate" not in line, out


def test_guide_plugin_answers_the_interface(guide_plugin):
    from lightning.pytorch.strategies import DDPStrategy
    from transformers import LlamaForCausalLM

    from shardlab.recipes.model import model_config

    strategy = registry.get("ddp_lean").build()
    ctx = RunContext(accelerator="cpu", devices=2, num_nodes=1, precision="bf16-mixed", grad_accum=1, grad_clip=1.0,
                     micro_batch_size=2)
    plan = strategy.precision_plan(ctx)
    assert (plan.compute, plan.master, plan.grad_reduce, plan.optimizer_states) == ("bf16", "fp32", "fp32", "fp32")
    strategy.check(ctx)
    with pytest.raises(UserError, match="--grad-reduce-dtype bf16"):
        strategy.check(RunContext(**{**ctx.__dict__, "grad_reduce_dtype": "bf16"}))
    lightning = strategy.lightning_strategy(ctx)
    assert isinstance(lightning, DDPStrategy) and lightning._ddp_kwargs["gradient_as_bucket_view"] is True
    model = LlamaForCausalLM(model_config("tiny")).to(torch.bfloat16)  # one process: rank 0
    state = strategy.full_state_dict(model)
    assert "lm_head.weight" in state and "model.layers.0.self_attn.q_proj.weight" in state
    assert all(t.dtype == torch.float32 and t.device.type == "cpu" for t in state.values())
