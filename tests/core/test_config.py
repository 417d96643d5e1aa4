import pytest

from shardlab.core.config import RunConfig, load_config
from shardlab.core.errors import UserError


def test_every_field_has_a_docstring():
    assert all(f.description for f in RunConfig.model_fields.values())


def test_yaml_then_flags(tmp_path):
    f = tmp_path / "run.yaml"
    f.write_text("strategy: zero3\nmax_steps: 7\nlr: 0.01\n")
    cfg = load_config(str(f), {"max_steps": "9"})
    assert (cfg.strategy, cfg.max_steps, cfg.lr) == ("zero3", 9, 0.01)


def test_all_problems_reported_at_once_by_flag():
    with pytest.raises(UserError) as e:
        load_config(None, {"lr": -1, "micro_batch_size": 0, "colour": "red"})
    msg = str(e.value)
    assert "--lr" in msg and "--micro-batch-size" in msg and "--colour: unknown field" in msg
    assert "\n" not in msg


def test_devices_zero_is_refused():
    with pytest.raises(UserError, match="--devices: must be at least 1"):
        load_config(None, {"devices": "0"})


def test_experiments_from_the_flag_and_from_yaml(tmp_path):
    """--experiments is comma-separated; YAML gives a list or the same string; blanks and repeats dropped, order kept."""
    assert RunConfig().experiments is None  # the preset's defaults, filled when the run is resolved
    assert load_config(None, {"experiments": "none"}).experiments == []
    assert load_config(None, {"experiments": " fused-step,,lean-config,fused-step "}).experiments == ["fused-step",
                                                                                                      "lean-config"]
    for text in ("experiments: [lean-config, fused-step]\n", "experiments: lean-config,fused-step\n"):
        (tmp_path / "run.yaml").write_text(text)
        assert load_config(str(tmp_path / "run.yaml"), {}).experiments == ["lean-config", "fused-step"]
    with pytest.raises(UserError, match="^--experiments: "):
        load_config(None, {"experiments": {"fused-step": True}})
