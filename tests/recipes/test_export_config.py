"""`recipe export-config`: files that Accelerate's and DeepSpeed's own config loaders read.

export-config starts no process: it runs in this one (the in_process fixture, tests/conftest.py)."""
from __future__ import annotations

import json

import pytest
from accelerate.commands.config.config_args import load_config_from_file
from deepspeed.runtime.config import DeepSpeedConfig


@pytest.mark.parametrize("preset,stage,opt,param", [("zero2", 2, False, False), ("zero3", 3, False, False),
                                                    ("zero3_offload", 3, True, False), ("zero3_offload_all", 3, True, True)])
def test_deepspeed_json_is_read_by_deepspeed(in_process, tmp_path, preset, stage, opt, param):
    out = tmp_path / "ds_config.json"
    rc, _, err = in_process("export-config", "--format", "deepspeed", "--strategy", preset, "--accelerator", "gpu",
                            "--devices", "1", "--precision", "bf16-mixed", "--grad-accum", "4", "--micro-batch-size", "2",
                            "--output", out)
    assert rc == 0, err
    ds = DeepSpeedConfig(str(out))  # DeepSpeed's own parser and sanity checks (world size 1 outside a job)
    assert ds.zero_optimization_stage == stage and ds.bfloat16_config.enabled
    assert (ds.train_batch_size, ds.train_micro_batch_size_per_gpu, ds.gradient_accumulation_steps) == (8, 2, 4)
    assert ds.zero_config.offload_optimizer is not None if opt else ds.zero_config.offload_optimizer is None
    assert (ds.zero_config.offload_param is not None) == param
    if stage == 3:
        assert ds.zero_config.gather_16bit_weights_on_model_save  # else from_pretrained cannot load the save


@pytest.mark.parametrize("preset,kind", [("ddp", "MULTI_GPU"), ("zero3", "DEEPSPEED"), ("fsdp", "FSDP")])
def test_accelerate_yaml_is_read_by_accelerate(in_process, tmp_path, preset, kind):
    out = tmp_path / "accelerate.yaml"
    rc, _, err = in_process("export-config", "--format", "accelerate", "--strategy", preset, "--accelerator", "gpu",
                            "--devices", "8", "--num-nodes", "2", "--micro-batch-size", "4", "--output", out)
    assert rc == 0, err
    cfg = load_config_from_file(str(out))
    assert cfg.distributed_type == kind and cfg.num_processes == 16 and cfg.num_machines == 2
    if kind == "DEEPSPEED":
        assert cfg.deepspeed_config["zero_stage"] == 3 and cfg.deepspeed_config["zero3_save_16bit_model"] is True
    if kind == "FSDP":
        assert cfg.fsdp_config["fsdp_version"] == 2


def test_no_deepspeed_form_for_fsdp_and_nothing_written(in_process, tmp_path):
    out = tmp_path / "x.json"
    rc, _, err = in_process("export-config", "--format", "deepspeed", "--strategy", "fsdp", "--output", out)
    assert rc == 2 and "has no deepspeed form" in err and not out.exists()
