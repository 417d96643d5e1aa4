"""A user's ds_config.json: autos filled, unknown keys named, contradictions refused, DeepSpeed validates."""
from __future__ import annotations

import pytest

from shardlab.strategies import deepspeed_config as ds_config
from shardlab.core.errors import UserError

RUN = dict(micro_batch_size=4, grad_accum=2, world_size=8, grad_clip=1.0, precision="bf16-mixed", stage=3,
           offload="none", lr=3e-4, weight_decay=0.1, hidden_size=4096)


def test_auto_values_are_filled_from_the_run():
    cfg = {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
           "gradient_clipping": "auto", "bf16": {"enabled": "auto"}, "fp16": {"enabled": "auto"},
           "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
                                 "stage3_param_persistence_threshold": "auto"},
           "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}}}
    filled, changes, warnings = ds_config.reconcile(cfg, RUN, "ds.json")
    assert (filled["train_batch_size"], filled["train_micro_batch_size_per_gpu"], filled["gradient_accumulation_steps"]) == (64, 4, 2)
    assert filled["bf16"]["enabled"] is True and filled["fp16"]["enabled"] is False and filled["gradient_clipping"] == 1.0
    assert filled["zero_optimization"]["reduce_bucket_size"] == 4096 * 4096
    assert filled["optimizer"]["params"] == {"lr": 3e-4, "weight_decay": 0.1}
    assert not changes and not warnings


def test_blog_keys_are_named_and_gradient_checkpointing_is_mapped():
    cfg = {"zero_optimization": {"stage": 3}, "gradient_checkpointing": True, "flash_attention": True}
    filled, changes, warnings = ds_config.reconcile(cfg, RUN, "ds.json")
    assert changes == {"activation_checkpointing": True} and "gradient_checkpointing" not in filled
    assert any("'flash_attention'" in w for w in warnings) and any("mapped to --activation-checkpointing on" in w for w in warnings)


@pytest.mark.parametrize("cfg,expected", [
    ({"train_micro_batch_size_per_gpu": 8}, "train_micro_batch_size_per_gpu is 8 in ds.json but --micro-batch-size gives 4"),
    ({"zero_optimization": {"stage": 2}}, "zero_optimization.stage is 2 in ds.json but --strategy gives 3"),
    ({"fp16": {"enabled": True}}, "fp16.enabled is True in ds.json but --precision"),
    ({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}}, "offloads optimizer in ds.json"),
    ({"train_batch_size": 48}, "train_batch_size is 48 in ds.json"),
])
def test_contradictions_name_both(cfg, expected):
    with pytest.raises(UserError, match=expected.replace(".", r"\.").replace("(", r"\(")):
        ds_config.reconcile(cfg, RUN, "ds.json")


OFFLOAD = {**RUN, "offload": "optimizer"}


@pytest.mark.parametrize("ratio,flag,outcome", [
    (0.5, 0.5, 0.5),  # the same: kept
    ("auto", 0.25, 0.25),  # filled from --offload-ratio
    ("auto", 1.0, 1.0),
    (0.5, 0.25, "zero_optimization.offload_optimizer.ratio is 0.5 in ds.json but --offload-ratio gives 0.25"),
    (0.5, 1.0, "zero_optimization.offload_optimizer.ratio is 0.5 in ds.json but --offload-ratio gives 1.0"),
])
def test_offload_ratio_in_the_file_against_the_flag(ratio, flag, outcome):
    cfg = {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": ratio}}}
    run = {**OFFLOAD, "offload_ratio": flag}
    if isinstance(outcome, str):
        with pytest.raises(UserError, match=outcome.replace(".", r"\.")):
            ds_config.reconcile(cfg, run, "ds.json")
    else:
        filled, _, _ = ds_config.reconcile(cfg, run, "ds.json")
        assert filled["zero_optimization"]["offload_optimizer"]["ratio"] == outcome


def test_the_files_offload_ratio_becomes_the_runs():
    cfg = {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 0.3}}}
    fields, _ = ds_config.intent(cfg, "ds.json")
    assert fields["strategy"] == "zero3_offload" and fields["offload_ratio"] == 0.3
    cfg["zero_optimization"]["offload_optimizer"]["ratio"] = "auto"
    assert "offload_ratio" not in ds_config.intent(cfg, "ds.json")[0]


def test_deepspeed_rejects_a_bad_section():
    with pytest.raises(UserError, match="DeepSpeed rejects ds.json"):
        ds_config.reconcile({"zero_optimization": {"stage": 3, "bogus_knob": 1}}, RUN, "ds.json")


def test_bad_json(tmp_path):
    (tmp_path / "x.json").write_text("{nope")
    with pytest.raises(UserError, match="not valid JSON"):
        ds_config.load(str(tmp_path / "x.json"))
