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


def test_offload_ratio_reaches_deepspeed_and_the_default_is_unchanged(in_process, tmp_path):
    """--offload-ratio 0.5 writes offload_optimizer.ratio and sub_group_size 1e7 (enough sub-groups for the ratio,
    strategies/deepspeed.py); without it, or at 1, the file is byte for byte the same, with no ratio and gpu-cast's
    sub-groups of 1e8 (a zero3_offload default: one sub-group's copy to the GPU under the next one's CPU step)."""
    written = {}
    for name, flags in (("default", []), ("ratio-1", ["--offload-ratio", "1"]), ("half", ["--offload-ratio", "0.5"])):
        out = tmp_path / f"{name}.json"
        rc, _, err = in_process("export-config", "--format", "deepspeed", "--strategy", "zero3_offload", "--accelerator",
                                "gpu", "--devices", "1", "--precision", "bf16-mixed", "--micro-batch-size", "2", "--output", out,
                                *flags)
        assert rc == 0, err
        written[name] = out.read_bytes()
    assert written["ratio-1"] == written["default"]
    assert b"ratio" not in written["default"]
    assert json.loads(written["default"])["zero_optimization"]["sub_group_size"] == 10**8
    ds = DeepSpeedConfig(str(tmp_path / "half.json"))  # DeepSpeed's own parser accepts it
    assert ds.zero_config.offload_optimizer.ratio == 0.5 and ds.zero_config.sub_group_size == 10**7
    default = json.loads(written["default"])
    half = json.loads(written["half"])
    default["zero_optimization"]["offload_optimizer"]["ratio"] = 0.5
    default["zero_optimization"]["sub_group_size"] = 10**7
    assert half == default  # nothing else changes


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


def test_float8_reaches_accelerate_and_is_named_where_deepspeed_has_no_key(in_process, tmp_path, monkeypatch):
    for name in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        monkeypatch.delenv(name, raising=False)
    common = ("--strategy", "zero2", "--accelerator", "gpu", "--devices", "1", "--micro-batch-size", "4", "--float8")
    rc, _, err = in_process("export-config", "--format", "accelerate", *common, "--output", tmp_path / "a.yaml")
    assert rc == 0, err
    cfg = load_config_from_file(str(tmp_path / "a.yaml"))  # accelerate's own reader
    assert cfg.mixed_precision == "fp8" and cfg.fp8_config["backend"] == "AO"
    rc, out, err = in_process("export-config", "--format", "deepspeed", *common, "--output", tmp_path / "ds.json")
    assert rc == 0 and "--float8 is not in a ds_config.json" in out, err
    # a GPU run's allocator setting is an environment variable, not a key of either file: named where the environment
    # does not already set it
    assert "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in your launcher's environment" in out


@pytest.mark.parametrize("fmt", ["deepspeed", "accelerate"])
def test_experiments_do_not_stop_an_export(in_process, tmp_path, fmt):
    """The preset's experiments (zero3's defaults here): the file is written with what they set in the backend's
    config (lean-config's DeepSpeed keys), and a note says that what shardlab's code does at run time (fused-step) is
    not in it."""
    out = tmp_path / "cfg"
    rc, printed, err = in_process("export-config", "--format", fmt, "--strategy", "zero3", "--accelerator", "gpu",
                                  "--devices", "1", "--micro-batch-size", "4", "--kernels", "torch", "--output", out)
    assert rc == 0 and out.is_file(), err
    assert ("recipe: note: experiments lean-config,fused-step,late-wait,sub-groups,direct-grads: the file holds what "
            "they set") in printed
    if fmt == "deepspeed":
        written = json.loads(out.read_text())
        assert written["timers"] == {"throughput": {"enabled": False}}
        assert written["zero_optimization"]["memory_efficient_linear"] is False
        assert written["zero_optimization"]["sub_group_size"] == 2 * 10**8  # sub-groups


def test_no_deepspeed_form_for_fsdp_and_nothing_written(in_process, tmp_path):
    out = tmp_path / "x.json"
    rc, _, err = in_process("export-config", "--format", "deepspeed", "--strategy", "fsdp", "--output", out)
    assert rc == 2 and "has no deepspeed form" in err and not out.exists()
