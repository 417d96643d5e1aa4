"""A user's own ds_config.json, brought into a shardlab run.

Read, `"auto"` values filled from the run (as the Hugging Face Trainer does), validated by DeepSpeed's
own config classes, unknown top-level keys named in a warning, and every value that contradicts the
run's flags reported with both names.
"""
from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

from shardlab.core import precision
from shardlab.core.config import same_value
from shardlab.core.errors import UserError

# Blog configs carry these; DeepSpeed ignores them silently. key -> (shardlab field, value to set)
_MAPPED = {"gradient_checkpointing": "activation_checkpointing"}


def _known_top_level_keys() -> set[str]:
    """Every top-level key DeepSpeed's config reader looks up: the string constants it defines."""
    import deepspeed.runtime.constants as c

    keys = {v for k, v in vars(c).items() if k.isupper() and isinstance(v, str) and v.islower()}
    return keys | {"zero_optimization", "optimizer", "scheduler", "bf16", "bfloat16", "fp16", "amp", "activation_checkpointing",
                   "aio", "flops_profiler", "comms_logger", "tensorboard", "wandb", "csv_monitor", "compile",
                   "data_efficiency", "curriculum_learning", "autotuning", "elasticity", "nebula", "checkpoint",
                   "communication_data_type", "seq_parallel_communication_data_type", "zero_allow_untested_optimizer",
                   "zero_force_ds_cpu_optimizer", "steps_per_print", "wall_clock_breakdown", "memory_breakdown",
                   "gradient_clipping", "prescale_gradients", "gradient_predivide_factor", "sparse_gradients",
                   "dump_state", "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                   "data_types", "timers", "pipeline", "weight_quantization", "compression_training", "hybrid_engine",
                   "eigenvalue", "quantize_training", "dataloader_drop_last", "use_data_before_expert_parallel_",
                   "graph_harvesting", "torch_autocast", "tensor_parallel", "zenflow", "sequence_parallel_size"}


def load(path: str) -> dict[str, Any]:
    file = Path(path)
    if not file.is_file():
        raise UserError(f"--deepspeed-config {path}: no such file")
    try:
        cfg = json.loads(file.read_text())
    except ValueError as e:
        raise UserError(f"--deepspeed-config {path}: not valid JSON ({e}); fix the file") from None
    if not isinstance(cfg, dict):
        raise UserError(f"--deepspeed-config {path}: expected a JSON object")
    return cfg


# DeepSpeed's LR schedulers that have a shardlab equivalent (deepspeed/runtime/lr_schedules.py):
# WarmupLR holds the lr after warm-up, WarmupDecayLR decays linearly to 0 at total_num_steps,
# WarmupCosineLR decays on a cosine to cos_min_ratio x lr.
SCHEDULES = {"WarmupLR": "constant", "WarmupDecayLR": "linear", "WarmupCosineLR": "cosine"}


def _given(section: Any, key: str) -> bool:
    return isinstance(section, dict) and key in section and section[key] != "auto"


def intent(cfg: dict[str, Any], name: str) -> tuple[dict[str, Any], list[str]]:
    """What the file says about the run, as RunConfig fields ("auto" says nothing), and a note per field.

    The preset follows zero_optimization (stage, offload_optimizer, offload_param); precision, the top-level
    gradient_checkpointing that Hugging Face Trainer users write, clipping, batch, optimizer values and the
    scheduler become the run's wherever the user gave no flag (the caller decides that)."""
    zero = cfg.get("zero_optimization")
    if not _given(zero, "stage") or zero["stage"] not in (1, 2, 3):
        raise UserError(f"--deepspeed-config {name}: no zero_optimization.stage (1, 2 or 3); say which ZeRO stage the file is for")
    offload = _offload(zero)
    fields: dict[str, Any] = {"strategy": f"zero{zero['stage']}" + {"none": "", "optimizer": "_offload", "all": "_offload_all"}[offload]}
    if _given(zero.get("offload_optimizer"), "ratio"):  # partial offload (--offload-ratio); Strategy.check refuses it but for zero3_offload
        fields["offload_ratio"] = float(zero["offload_optimizer"]["ratio"])
    if (cfg.get("bf16") or cfg.get("bfloat16") or {}).get("enabled") is True:
        fields["precision"] = "bf16-mixed"
    elif (cfg.get("fp16") or {}).get("enabled") is True:
        fields["precision"] = "16-mixed"
    if "gradient_checkpointing" in cfg:
        fields["activation_checkpointing"] = bool(cfg["gradient_checkpointing"])
    for key, field in (("gradient_clipping", "grad_clip"), ("train_micro_batch_size_per_gpu", "micro_batch_size"),
                       ("gradient_accumulation_steps", "grad_accum")):
        if _given(cfg, key):
            fields[field] = cfg[key]
    params = (cfg.get("optimizer") or {}).get("params") or {}
    for key, field in (("lr", "lr"), ("weight_decay", "weight_decay"), ("eps", "adam_eps")):
        if _given(params, key):
            fields[field] = float(params[key])
    if _given(params, "betas"):
        fields["adam_beta1"], fields["adam_beta2"] = map(float, params["betas"])
    notes = []
    scheduler = cfg.get("scheduler")
    if scheduler:
        kind, sp = scheduler.get("type"), scheduler.get("params") or {}
        if kind not in SCHEDULES:
            raise UserError(f"--deepspeed-config {name}: scheduler {kind} has no shardlab equivalent; use one of "
                            f"{', '.join(SCHEDULES)} (they map to --lr-schedule) or remove the scheduler section")
        fields["lr_schedule"] = SCHEDULES[kind]
        if _given(sp, "warmup_num_steps"):
            fields["warmup_steps"] = int(sp["warmup_num_steps"])
        if _given(sp, "total_num_steps"):
            fields["max_steps"] = int(sp["total_num_steps"])
        if _given(sp, "warmup_max_lr"):
            fields["lr"] = float(sp["warmup_max_lr"])
        if kind == "WarmupDecayLR":
            fields["min_lr_ratio"] = 0.0
        if kind == "WarmupCosineLR" and _given(sp, "cos_min_ratio"):
            fields["min_lr_ratio"] = float(sp["cos_min_ratio"])
        if sp.get("warmup_type", "log") != "linear":
            notes.append(f"{name}: the scheduler's {sp.get('warmup_type', 'log')} warm-up (DeepSpeed's default) runs as "
                         f"shardlab's linear warm-up")
    return fields, notes


def reconcile(cfg: dict[str, Any], run: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """Fill "auto" from `run`, check the rest against it.

    run: micro_batch_size, grad_accum, world_size, grad_clip, precision, stage, offload, lr, weight_decay,
    hidden_size, activation_checkpointing, offload_ratio (default 1). Returns (filled config, run fields to change,
    warnings).
    """
    cfg = copy.deepcopy(cfg)
    warnings, changes, problems = [], {}, []
    unknown = sorted(set(cfg) - _known_top_level_keys())
    for key in unknown:
        if key in _MAPPED:
            field = _MAPPED[key]
            changes[field] = bool(cfg.pop(key))
            warnings.append(f"{name}: '{key}' is not a DeepSpeed key; mapped to --{field.replace('_', '-')} "
                            f"{'on' if changes[field] else 'off'}")
        else:
            warnings.append(f"{name}: DeepSpeed does not know the key '{key}'; it has no effect")
    h = run["hidden_size"]
    half = precision.half(run["precision"])
    expected = {
        ("train_micro_batch_size_per_gpu",): (run["micro_batch_size"], "--micro-batch-size"),
        ("gradient_accumulation_steps",): (run["grad_accum"], "--grad-accum"),
        ("train_batch_size",): (run["micro_batch_size"] * run["grad_accum"] * run["world_size"],
                                "--micro-batch-size x --grad-accum x world size"),
        ("gradient_clipping",): (run["grad_clip"], "--grad-clip"),
        ("bf16", "enabled"): (half == "bf16", "--precision"),
        ("fp16", "enabled"): (half == "fp16", "--precision"),
        ("zero_optimization", "stage"): (run["stage"], "--strategy"),
        ("zero_optimization", "offload_optimizer", "ratio"): (run.get("offload_ratio", 1.0), "--offload-ratio"),
        ("optimizer", "params", "lr"): (run["lr"], "--lr"),
        ("optimizer", "params", "weight_decay"): (run["weight_decay"], "--weight-decay"),
        # the Hugging Face Trainer's fills for ZeRO-3 buckets
        ("zero_optimization", "reduce_bucket_size"): (h * h, None),
        ("zero_optimization", "stage3_prefetch_bucket_size"): (int(0.9 * h * h), None),
        ("zero_optimization", "stage3_param_persistence_threshold"): (10 * h, None),
    }
    for path, (value, flag) in expected.items():
        parent = cfg
        for key in path[:-1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
        if not isinstance(parent, dict) or path[-1] not in parent:
            continue
        given = parent[path[-1]]
        if given == "auto":
            parent[path[-1]] = value
        elif flag and not same_value(given, value):
            problems.append(f"{'.'.join(path)} is {given!r} in {name} but {flag} gives {value!r}")
    offload = _offload(cfg.get("zero_optimization", {}))
    if offload != run["offload"]:
        problems.append(f"zero_optimization offloads {offload} in {name} but --strategy offloads {run['offload']}; "
                        f"pick the preset that matches (e.g. zero{run['stage']}{'' if offload == 'none' else '_offload' if offload == 'optimizer' else '_offload_all'})")
    if problems:
        raise UserError("; ".join(problems))
    _validate_with_deepspeed(cfg, run, name)
    return cfg, changes, warnings


def _offload(zero: dict[str, Any]) -> str:
    return "all" if _device(zero.get("offload_param")) else "optimizer" if _device(zero.get("offload_optimizer")) else "none"


def _device(section: Any) -> bool:
    return isinstance(section, dict) and section.get("device", "none") not in ("none", None)


def _validate_with_deepspeed(cfg: dict[str, Any], run: dict[str, Any], name: str) -> None:
    """DeepSpeed's DeepSpeedConfig parses every section with its own pydantic models."""
    from deepspeed.runtime.config import DeepSpeedConfig

    probe = {k: v for k, v in cfg.items() if k != "train_batch_size"}  # outside a job DeepSpeed assumes world size 1
    probe.setdefault("train_micro_batch_size_per_gpu", run["micro_batch_size"])  # the run supplies what the file omits
    probe.setdefault("gradient_accumulation_steps", run["grad_accum"])
    try:
        DeepSpeedConfig(probe)
    except Exception as e:  # DeepSpeed raises ValidationError, AssertionError, ValueError...
        first = str(e).strip().splitlines()
        raise UserError(f"--deepspeed-config: DeepSpeed rejects {name}: {' '.join(first[:3])}") from None


def warn(lines: list[str]) -> None:
    for line in lines:
        print(f"recipe: warning: {line}", file=sys.stderr)
