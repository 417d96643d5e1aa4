"""Training options every user expects, mapped to each backend: schedule, AdamW, loss-scale knobs, metrics."""
from __future__ import annotations

import csv

import pytest

from shardlab.core import registry
from shardlab.core.errors import UserError
from shardlab.core.strategy import OptimizerSpec, RunContext, grad_scaler_kwargs
from shardlab.recipes.module import lr_factor


def _ctx(**kw):
    base = dict(accelerator="gpu", devices=8, num_nodes=1, precision="16-mixed", grad_accum=1, grad_clip=1.0,
                micro_batch_size=1, loss_scale=(12, 500, 4, 0.5))
    return RunContext(**{**base, **kw})


def test_warmup_then_cosine_decay():
    f = lr_factor(OptimizerSpec(lr=1.0, schedule="cosine", warmup_steps=4, min_lr_ratio=0.1, total_steps=14))
    assert [round(f(i), 3) for i in (0, 3, 4, 9, 14)] == [0.2, 0.8, 1.0, 0.55, 0.1]
    g = lr_factor(OptimizerSpec(lr=1.0, schedule="linear", warmup_steps=0, min_lr_ratio=0.0, total_steps=10))
    assert [g(i) for i in (0, 5, 10)] == [1.0, 0.5, 0.0]


def test_fp16_loss_scale_knobs_reach_deepspeed():
    fp16 = registry.get("zero3").build().ds_config(_ctx())["fp16"]
    assert fp16 == {"enabled": True, "loss_scale": 0, "initial_scale_power": 12, "loss_scale_window": 500,
                    "hysteresis": 4, "min_loss_scale": 0.5}


def test_fp16_loss_scale_knobs_reach_torch_gradscaler():
    ctx = _ctx(loss_scale=(12, 500, 2, 1.0))
    assert grad_scaler_kwargs(ctx) == {"init_scale": 2.0**12, "growth_interval": 500}
    kwargs = registry.get("ddp").build().trainer_kwargs(ctx)  # (the scaler disables itself here: no CUDA)
    assert type(kwargs["plugins"][0].scaler).__name__ == "GradScaler" and "precision" not in kwargs


def test_gradscaler_has_no_hysteresis_so_ddp_refuses_it():
    ddp = registry.get("ddp").build()
    with pytest.raises(UserError, match="--loss-scale-hysteresis 4: strategy 'ddp'.*no such knob"):
        ddp.check(_ctx())


def test_schedule_and_metrics_files_of_every_backend(four_families):
    # the shared compare (tests/conftest.py): cosine after 2 warm-up steps, beta2 0.99, weight decay 0.01, gradient
    # accumulation 2 with clipping, across an epoch's tail; its parity: test_compare.py. Lightning and DeepSpeed both
    # divide the loss by the accumulation steps; shardlab scales once.
    for name in ("ddp", "zero2", "zero3", "fsdp"):
        logs = four_families["output"] / "runs" / name / "logs"
        rows = list(csv.DictReader(open(logs / "csv" / "metrics.csv")))
        assert [round(float(r["lr"]) / 1e-3, 3) for r in rows] == [0.333, 0.667, 1.0, 0.868, 0.55, 0.232]
        assert list((logs / "tensorboard").glob("events.out.tfevents.*"))


def test_warmup_longer_than_training_names_both(in_process, tmp_path):
    rc, _, err = in_process("run", "--warmup-steps", "100", "--max-steps", "10", "--output", tmp_path / "o")
    assert rc == 2 and "--warmup-steps 100 is more than --max-steps 10" in err and not (tmp_path / "o").exists()
