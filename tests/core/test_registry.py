import json

import pytest

from shardlab.core import registry
from shardlab.core.errors import UserError

REQUIRED = {"ddp", "zero2", "zero2_offload", "zero3", "zero3_offload", "zero3_offload_all", "fsdp", "fsdp_offload"}


def test_builtin_presets_are_registered():
    assert REQUIRED <= set(registry.presets())


def test_unknown_name_lists_known_names():
    with pytest.raises(UserError, match="--strategy zero4: unknown strategy; known: ddp, .*zero3_offload_all"):
        registry.get("zero4")


def test_offload_resolves_within_family():
    assert registry.with_offload(registry.get("zero3"), "optimizer").name == "zero3_offload"
    assert registry.with_offload(registry.get("zero3"), "all").name == "zero3_offload_all"
    assert registry.with_offload(registry.get("fsdp"), "all").name == "fsdp_offload"
    with pytest.raises(UserError, match="--offload optimizer: strategy 'ddp' has no such CPU offload"):
        registry.with_offload(registry.get("ddp"), "optimizer")


def test_built_strategy_carries_its_preset():
    s = registry.get("zero3_offload").build()
    assert s.name == "zero3_offload" and s.capabilities.offload == "optimizer" and s.capabilities.shards_parameters


def test_recipe_strategies_json(in_process):  # in this process (tests/conftest.py); plug-ins: test_plugins.py
    rc, out, _ = in_process("strategies", "--json")
    assert rc == 0
    rows = json.loads(out)
    assert REQUIRED <= {r["name"] for r in rows}
    assert all({"description", "capabilities", "source"} <= set(r) for r in rows)


def test_recipe_strategies_table(in_process):
    rc, out, _ = in_process("strategies")
    assert rc == 0 and "zero3_offload_all" in out
    zero3 = out.split("\n  zero3 ", 1)[1].splitlines()  # its row, then one line per experiment under it
    assert zero3[1].startswith("    --experiments lean-config: ") and zero3[2].startswith("    --experiments fused-step: ")
    assert all(line.endswith(" (on by default; --experiments none: off)") for line in zero3[1:3] + zero3[6:9])
    assert zero3[3].startswith("    --experiments no-fetch-sync: ") and "by default" not in zero3[3]  # offered only
    assert zero3[4].startswith("    --experiments param-lists: ") and "by default" not in zero3[4]
    assert zero3[5].startswith("    --experiments no-nvtx: ") and "by default" not in zero3[5]
    assert zero3[6].startswith("    --experiments late-wait: ")
    assert zero3[7].startswith("    --experiments sub-groups: ")
    assert zero3[8].startswith("    --experiments direct-grads: ")
    assert zero3[9].startswith("  zero3_offload ")
    rc, out, _ = in_process("strategies", "--json")
    rows = {r["name"]: r for r in json.loads(out)}
    assert set(rows["zero3"]["capabilities"]["experiments"]) == {"lean-config", "fused-step", "no-fetch-sync", "param-lists",
                                                                 "no-nvtx", "late-wait", "sub-groups", "direct-grads"}
    assert rows["zero3"]["capabilities"]["switchable"] == ["no-fetch-sync", "param-lists", "no-nvtx",
                                                                "late-wait"]
    assert rows["fsdp"]["capabilities"]["switchable"] == ["direct-cast", "clip-in-adamw"]
    assert list(rows["fsdp"]["capabilities"]["experiments"]) == ["direct-cast", "clip-in-adamw", "direct-grads"]
    assert rows["fsdp"]["capabilities"]["default_experiments"] == ["direct-cast", "clip-in-adamw", "direct-grads"]
    assert rows["ddp"]["capabilities"]["experiments"] == {}
    assert rows["zero3"]["capabilities"]["default_experiments"] == ["lean-config", "fused-step", "late-wait", "sub-groups",
                                                                    "direct-grads"]
