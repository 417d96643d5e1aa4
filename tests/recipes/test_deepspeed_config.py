"""--deepspeed-config end to end: a blog-style file, and export -> import giving the same run."""
from __future__ import annotations

import json

from tests.conftest import rel_diff


def test_export_then_import_gives_the_same_run(recipe, in_process, four_families, tmp_path):
    # the shared compare's zero3 run (tests/conftest.py): its schedule, AdamW and accumulation go through the file
    flags = ("--strategy", "zero3", "--accelerator", "cpu", "--devices", "2", *four_families["flags"])
    cfg = tmp_path / "ds_config.json"
    rc, _, err = in_process("export-config", "--format", "deepspeed", *flags, "--output", cfg)
    assert rc == 0, err
    proc = recipe("run", *flags, "--deepspeed-config", cfg, "--output", tmp_path / "run")
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert s["config"]["deepspeed_config"] == str(cfg)
    assert rel_diff(s["losses"], four_families["runs"]["zero3"]["losses"]) < 1e-5  # the same run without the file


def test_blog_config_with_autos_and_unknown_keys_runs_with_warnings(recipe, tmp_path):
    cfg = tmp_path / "blog.json"
    cfg.write_text(json.dumps({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
                               "gradient_accumulation_steps": "auto", "gradient_checkpointing": True,
                               "zero_optimization": {"stage": 3, "overlap_comm": True, "reduce_bucket_size": "auto"},
                               "flash_attention": True}))
    proc = recipe("run", "--strategy", "zero3", "--accelerator", "cpu", "--devices", "2", "--max-steps", "2",
                  "--deepspeed-config", cfg, "--output", tmp_path / "run")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "'flash_attention'" in proc.stderr and "mapped to --activation-checkpointing on" in proc.stderr
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["config"]["activation_checkpointing"] is True


def test_contradiction_and_wrong_strategy_are_refused(in_process, tmp_path):
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"train_micro_batch_size_per_gpu": 16, "zero_optimization": {"stage": 3}}))
    # the file states intent (micro-batch 16): only a flag the user typed can contradict it
    for flags, expected in ((["--strategy", "zero3", "--micro-batch-size", "4"], "ds.json but --micro-batch-size gives 4"),
                            (["--strategy", "fsdp"], "ds.json describes zero3 (zero_optimization stage and offload)")):
        # refused before any process starts: in this one (in_process, tests/conftest.py)
        rc, _, err = in_process("run", "--accelerator", "cpu", "--deepspeed-config", cfg, "--output", tmp_path / "o", *flags)
        assert rc == 2 and expected in err and not (tmp_path / "o").exists(), err
