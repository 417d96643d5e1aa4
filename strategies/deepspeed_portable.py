"""ZeRO's side of the portable checkpoint (recipes/portable.py): each parameter's full fp32 master and Adam
moments out of DeepSpeed, and back in at any stage, offload and world size.

DeepSpeed's own universal checkpoint (ds_to_universal) stays inside DeepSpeed; this goes through its public
per-parameter API (deepspeed.utils.safe_get_full_* / safe_set_full_*, collective). `optimizer` is DeepSpeed's
ZeRO optimizer; its `.optimizer` is the Adam that steps the flat fp32 partitions (torch's AdamW, or
DeepSpeedCPUAdam under offload).
"""
from __future__ import annotations

from typing import Callable, Optional

import torch
import torch.distributed as dist

from shardlab.strategies._common import ensure_adam_state, is_rank_zero


def state(model: torch.nn.Module, optimizer, stage: int):
    """Strategy.portable_state for ZeRO (collective)."""
    from deepspeed.utils import safe_get_full_fp32_param, safe_get_full_optimizer_state

    _link_optimizer_state(optimizer)
    for name, p in model.named_parameters():
        full = {"master": safe_get_full_fp32_param(p), "exp_avg": safe_get_full_optimizer_state(p, "exp_avg"),
                "exp_avg_sq": safe_get_full_optimizer_state(p, "exp_avg_sq")}
        yield name, ({k: v.detach().to("cpu", torch.float32).reshape(p.ds_shape if stage == 3 else p.shape)
                      for k, v in full.items()} if is_rank_zero() else None)


def load(model: torch.nn.Module, optimizer, read: Callable[..., torch.Tensor], step: int, stage: int) -> None:
    """Strategy.load_portable for ZeRO: the fp32 master, both moments and the module's own (16-bit) copy."""
    import deepspeed
    from deepspeed.utils import safe_set_full_fp32_param, safe_set_full_optimizer_state

    # DeepSpeed creates Adam's state at the first step; ZeRO-3 lists its flat fp32 partitions only inside it
    ensure_adam_state(optimizer.optimizer, step, getattr(optimizer, "fp32_partitioned_groups_flat", None))
    _link_optimizer_state(optimizer)
    for name, p in model.named_parameters():
        master = read("master", name)
        if stage == 3:
            for kind in ("master", "exp_avg", "exp_avg_sq"):
                _set_zero3_partition(p, master if kind == "master" else read(kind, name), None if kind == "master" else kind)
            with deepspeed.zero.GatheredParameters([p], modifier_rank=0), torch.no_grad():
                if is_rank_zero():  # the copy the module computes with, re-partitioned
                    p.data.copy_(master)
        else:
            safe_set_full_fp32_param(p, master)
            for kind in ("exp_avg", "exp_avg_sq"):
                safe_set_full_optimizer_state(p, read(kind, name), kind)
            with torch.no_grad():
                p.data.copy_(master)
    if dist.is_initialized():
        dist.barrier()


def _link_optimizer_state(optimizer) -> None:
    """ZeRO-1/2: point each parameter's fragment mapping at the optimizer's current Adam state, as its step does
    lazily once. A native resume (engine.load_checkpoint) rebuilds the mappings but leaves DeepSpeed's "linked"
    flag set, so safe_get_full_optimizer_state would find no state; ZeRO-3 reads the state directly."""
    if hasattr(optimizer, "_lazy_init_hp_params_optimizer_state"):
        optimizer._hp_optimizer_states_linked = False
        optimizer._lazy_init_hp_params_optimizer_state()


def _set_zero3_partition(param, value: torch.Tensor, key: Optional[str]) -> None:
    """This rank's part of a ZeRO-3 parameter's fp32 master (key None) or Adam state, from the full tensor.
    DeepSpeed's set_full_hp_param narrows the full tensor at rank x partition size, past its end on the last
    rank when the partition is padded; this copies only the elements the tensor has."""
    opt = param._z3_optimizer
    part, group = opt._get_fp32_opt_state_partition(param, release_swap_buffers=False, optim_state_key=key)
    start = part.numel() * opt._get_param_partition_rank(param)
    flat = value.flatten()[start:start + part.numel()]
    part.data[:flat.numel()].copy_(flat)

