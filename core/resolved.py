"""One run, resolved once: every default and `auto` decided, the hardware it was decided for, and why.

Built in the launching process (`recipes/resolve.py`), saved as OUTPUT/resolved.json for the rank processes,
and read by `recipe run`, `plan`, `compare`, `launch` and `export-config` alike: what plan prints is what
run does. Nothing downstream re-derives a default (torchtitan's ParallelDims, litgpt's setup() -> main()).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict

from shardlab.core.config import RunConfig
from shardlab.core.hardware import Hardware
from shardlab.core.strategy import OptimizerSpec, RunContext


class ResolvedRun(BaseModel):
    model_config = ConfigDict(frozen=True, use_attribute_docstrings=True)

    config: RunConfig
    """The run with nothing left to decide: strategy is a preset, accelerator, devices, precision, kernels,
    compile, micro-batch, accumulation, sequence length and output are set."""
    hardware: Hardware
    """What the run was decided for: probed here, or given (`--gpus`, `--gpu-memory-gib`, `--cpu-memory-gib`)."""
    model: dict[str, Any]
    """The model's name and shape: unique parameters, layers, hidden, heads, KV heads, intermediate, vocab, tied."""
    context_length: int
    """The model's max_position_embeddings."""
    decisions: list[str] = []
    """Every value taken from a default, the hardware or the user's DeepSpeed file, with the reason."""
    auto: Optional[dict[str, Any]] = None
    """`--strategy auto`: {choice, reasons}."""
    candidates: list[dict[str, Any]] = []
    """Every preset's estimate for this workload: name, gpu_bytes, cpu_bytes, fits, source, parts."""
    largest_micro_batch: Optional[int] = None
    """GPU runs: the largest micro-batch the memory estimate fits with the chosen preset."""
    estimate: Optional[dict[str, Any]] = None
    """The chosen preset's memory estimate: gpu_bytes, cpu_bytes, parts (None: it has no memory model)."""
    deepspeed_config: Optional[dict[str, Any]] = None
    """The user's ds_config.json with its "auto" values filled, as the DeepSpeed presets run it."""
    warnings: list[str] = []
    """What the user should read (keys DeepSpeed ignores, ...)."""

    @property
    def world_size(self) -> int:
        return self.config.devices * self.config.num_nodes

    def context(self) -> RunContext:
        c = self.config
        return RunContext(accelerator=c.accelerator, devices=c.devices, num_nodes=c.num_nodes, precision=c.precision,
                          grad_accum=c.grad_accum, grad_clip=c.grad_clip, micro_batch_size=c.micro_batch_size,
                          grad_reduce_dtype=c.grad_reduce_dtype, activation_checkpointing=c.activation_checkpointing,
                          compile=c.compile, fused_adds=bool(c.fused_adds), chunked_loss=c.chunked_loss,
                          kernels=c.kernels, float8=c.float8,
                          offload_ratio=1.0 if c.offload_ratio is None else c.offload_ratio,
                          experiments=tuple(c.experiments or ()),
                          loss_scale=(c.loss_scale_initial_power, c.loss_scale_window, c.loss_scale_hysteresis,
                                      c.loss_scale_min), native_config=self.deepspeed_config)

    def optimizer(self) -> OptimizerSpec:
        c = self.config
        return OptimizerSpec(lr=c.lr, weight_decay=c.weight_decay, betas=(c.adam_beta1, c.adam_beta2), eps=c.adam_eps,
                             schedule=c.lr_schedule, warmup_steps=c.warmup_steps, min_lr_ratio=c.min_lr_ratio,
                             total_steps=c.max_steps)

    def save(self, path: Path) -> None:
        write_atomic(path, self.model_dump_json(indent=2))

    @classmethod
    def load(cls, path: Path) -> "ResolvedRun":
        return cls.model_validate_json(Path(path).read_text())


def write_atomic(path: Path, text: str) -> None:
    """Write a file under a temporary name and rename it into place: a reader never sees half of it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_json_atomic(path: Path, obj: Any) -> None:
    write_atomic(path, json.dumps(obj, indent=2))
