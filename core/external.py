"""Pieces of other tools' config files that every adapter's `external_config` shares."""
from __future__ import annotations

from typing import Any

from shardlab.core.strategy import RunContext

_MIXED = {"32-true": "no", "bf16-mixed": "bf16", "bf16-true": "bf16", "16-mixed": "fp16"}


def accelerate_base(ctx: RunContext, distributed_type: str) -> dict[str, Any]:
    """Keys of an Accelerate config YAML (`accelerate config`'s ClusterConfig) common to every backend."""
    base = {
        "compute_environment": "LOCAL_MACHINE",
        "distributed_type": distributed_type,
        "mixed_precision": _MIXED[ctx.precision],
        "downcast_bf16": "no",
        "num_machines": ctx.num_nodes,
        "num_processes": ctx.world_size,
        "machine_rank": 0,
        "main_training_function": "main",
        "rdzv_backend": "static",
        "same_network": True,
        "use_cpu": ctx.accelerator == "cpu",
    }
    if ctx.float8:  # --float8: Accelerate's torchao backend converts the linears (it also leaves the first one in bf16)
        base.update(mixed_precision="fp8", fp8_config={"backend": "AO"})
    return base
