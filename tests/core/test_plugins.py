"""Plug-in strategies through real packages: the example installed with pip, broken ones as dist-info folders."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from shardlab.core import registry
from shardlab.core.strategy import Capabilities
from shardlab.strategies.ddp import DDP

EXAMPLE = Path(__file__).parents[2] / "examples" / "zero1"


@pytest.fixture(scope="module")
def zero1_path(tmp_path_factory) -> str:
    """`pip install examples/zero1` into a folder of its own (a real dist-info with its entry point)."""
    target = tmp_path_factory.mktemp("zero1-site")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(EXAMPLE)], check=True, capture_output=True)
    assert list(target.glob("shardlab_zero1-*.dist-info"))
    return str(target)


def _dist(site: Path, dist: str, module: str, source: str, entry: str) -> None:
    """A hand-made but real installed distribution: dist-info with METADATA and entry_points.txt."""
    info = site / f"{dist.replace('-', '_')}-0.1.dist-info"  # as pip names it
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[shardlab.strategies]\n{entry} = {module}:presets\n")
    (site / f"{module}.py").write_text(textwrap.dedent(source))


@pytest.fixture(scope="module")
def broken_path(tmp_path_factory) -> str:
    site = tmp_path_factory.mktemp("broken-site")
    _dist(site, "plugin-importerror", "plug_importerror", "import no_such_module_anywhere\n", "importerror")
    _dist(site, "plugin-duplicate", "plug_duplicate", """
        from shardlab.core.registry import Preset
        from shardlab.core.strategy import Capabilities
        from shardlab.strategies.ddp import DDP
        def presets():
            return [Preset(name="ddp", strategy_cls=DDP, description="again", capabilities=Capabilities(), family="x")]
        """, "duplicate")
    _dist(site, "plugin-missing", "plug_missing", """
        from shardlab.core.registry import Preset
        from shardlab.core.strategy import Capabilities, Strategy
        class Half(Strategy):
            def lightning_strategy(self, ctx): ...
        def presets():
            return [Preset(name="half", strategy_cls=Half, description="no export", capabilities=Capabilities(), family="half")]
        """, "missing")
    _dist(site, "plugin-noestimate", "plug_noestimate", """
        from shardlab.core.registry import Preset
        from shardlab.core.strategy import Capabilities
        from shardlab.strategies.ddp import DDP
        class PlainDDP(DDP):
            def model_state_bytes(self, shape, work):
                return None  # no memory model
        def presets():
            return [Preset(name="ddp_plain", strategy_cls=PlainDDP, description="DDP without a memory model",
                           capabilities=Capabilities(), family="ddp_plain")]
        """, "noestimate")
    return str(site)


@pytest.fixture(scope="module")
def listing(recipe, broken_path, zero1_path) -> dict:
    """`recipe strategies` and `recipe strategies --json` with the example and the broken plug-ins installed."""
    path = broken_path + ":" + zero1_path
    table, as_json = recipe("strategies", pythonpath=path), recipe("strategies", "--json", pythonpath=path)
    assert table.returncode == 0 and as_json.returncode == 0, table.stderr + as_json.stderr
    return {"table": table.stdout, "rows": json.loads(as_json.stdout)}


def test_example_plugin_is_listed_apart(listing):
    rows = {r["name"]: r for r in listing["rows"]}
    assert rows["zero1"]["source"] == "plugin:shardlab-zero1" and rows["ddp"]["source"] == "built-in"
    table = listing["table"]
    assert table.index("plug-ins:") < table.index("zero1")


def test_example_plugin_trains_and_compares_with_ddp(recipe, zero1_path, tmp_path):
    # on the Llama-3 test shape (tied embeddings, 128k vocabulary): the plug-in trains and exports it tied
    proc = recipe("compare", "--strategies", "ddp,zero1", "--accelerator", "cpu", "--devices", "2", "--model", "tiny-llama3",
                  "--micro-batch-size", "2", "--seq-len", "64", "--max-steps", "3", "--output", tmp_path, pythonpath=zero1_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = json.loads((tmp_path / "metrics.json").read_text())
    assert m["parity"] is True and len(m["strategies"]["zero1"]["losses"]) == 3
    hf = next(tmp_path.glob("runs/zero1*/hf"))
    assert json.loads((hf / "config.json").read_text())["tie_word_embeddings"] is True


def test_example_plugin_takes_part_in_the_plan(recipe, zero1_path):
    proc = recipe("plan", "--model", "llama-7b", "--accelerator", "gpu", "--gpus", "8", "--gpu-memory-gib", "80",
                  "--cpu-memory-gib", "1024", "--json", pythonpath=zero1_path)
    rows = {r["name"]: r for r in json.loads(proc.stdout)["strategies"]}
    assert rows["zero1"]["gpu_bytes"] > rows["zero2"]["gpu_bytes"] - 2**30 and rows["zero1"]["source"].startswith("plugin")


def test_broken_plugins_are_reported_and_the_rest_works(listing):
    out = listing["table"]
    assert "importerror (plugin-importerror): ModuleNotFoundError" in out
    assert "duplicate (plugin-duplicate): ValueError: preset 'ddp' is already registered" in out
    assert "missing (plugin-missing): TypeError" in out and "full_state_dict" in out
    assert "zero1" in out and "ddp_plain" in out and "zero3_offload_all" in out
    assert {r["name"] for r in listing["rows"] if "error" in r} == {
        "importerror (plugin-importerror)", "duplicate (plugin-duplicate)", "missing (plugin-missing)"}


def test_plugin_without_memory_model_is_no_estimate_and_never_chosen(recipe, broken_path):
    proc = recipe("plan", "--model", "llama-1b", "--accelerator", "gpu", "--gpus", "1", "--gpu-memory-gib", "141",
                  "--cpu-memory-gib", "1024", pythonpath=broken_path)
    assert proc.returncode == 0, proc.stderr
    line = next(l for l in proc.stdout.splitlines() if l.startswith("ddp_plain"))
    assert "no estimate" in line and "choice: ddp_plain" not in proc.stdout


def test_in_process_registration_with_the_decorator():
    @registry.strategy("ddp_inprocess_test", description="DDP registered by a decorator", capabilities=Capabilities())
    class InProcess(DDP):
        pass

    try:
        preset = registry.get("ddp_inprocess_test")
        assert preset.source == "in-process" and isinstance(preset.build(), InProcess)
    finally:
        registry._PRESETS.pop("ddp_inprocess_test")  # leave the process's registry as the other tests expect
