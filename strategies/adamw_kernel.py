"""One AdamW step of many fp32 tensors whose gradients may be 16-bit, each gradient upcast as it is read.

torch's fused AdamW wants the gradient in the weight's dtype, so a 16-bit gradient first becomes an fp32 copy (a read of
2 bytes and a write of 4 a parameter), which the kernel then reads (4 more), and under `grad_scale` writes back (4
more). Here one kernel reads the 16-bit gradient once (2 bytes) and writes nothing back: 26 bytes a parameter move
where torch's path moves 40 (the direct-grads levers of fsdp, strategies/fsdp_direct_grads.py, and of zero3,
strategies/deepspeed_direct_grads.py).

- On a GPU: one Triton launch for all the tensors whose gradients share a dtype, the arithmetic of torch's fused AdamW
  (ADAMW mode) in fp32: decay, both moments, then the bias-corrected step, the bias corrections taken on the host in
  double from the step count, as torch's single-tensor AdamW takes them. Each program steps one block of one tensor; it
  finds the tensor by a binary search of the tensors' first blocks, its weights, moments and length in a table made
  once (the weights and moments do not move; a few KiB), and its gradient's address in a table copied from pinned memory
  each step. One launch, not one a tensor: launched one at a
  time from Python, ~200 small kernels left the GPU waiting on the host for 2 ms of llama-1b's step (one H200,
  results/2026-12-06j-direct-grads.md). Against torch's fused kernel fed the upcast gradients: within a few fp32
  roundings (tests/strategies/test_fsdp_direct_grads.py, on the GPU).
- Elsewhere (CPU): torch's own fused AdamW on the upcast gradients, so a CPU run steps as fsdp's default path does, to
  the bit. The copy costs nothing that matters there.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    import torch

BLOCK = 2048  # elements a program: 8 KiB of each fp32 tensor
_GRAD_DTYPES = ("float32", "bfloat16", "float16")  # the kernel's G: which dtype it reads gradients as


def state_of(optimizer, param) -> dict:
    """torch AdamW `optimizer`'s state of `param` as `step` takes it: made (zeros, step 0) where it has not stepped yet,
    and its step count on the CPU (a fused AdamW's checkpoint holds it on the device: moved once)."""
    from shardlab.strategies._common import ensure_adam_state

    state = optimizer.state[param]
    if "step" not in state:
        ensure_adam_state(optimizer, 0, [param])
    if state["step"].device.type != "cpu":
        state["step"] = state["step"].cpu()
    return state


def options(group: dict) -> dict:
    """`step`'s hyperparameters from a torch AdamW param group."""
    beta1, beta2 = group["betas"]
    return dict(lr=group["lr"], beta1=beta1, beta2=beta2, eps=group["eps"], weight_decay=group["weight_decay"])


def step(params: list, grads: list, exp_avgs: list, exp_avg_sqs: list, steps: list, *, lr: float, beta1: float,
         beta2: float, eps: float, weight_decay: float, grad_scale: Optional[torch.Tensor], tables: dict,
         found_inf: Optional[torch.Tensor] = None) -> None:
    """Step fp32 `params` (plain tensors, with their moments, on one device) in place with `grads`; `steps` are their
    step counts (CPU float tensors, all equal), counted up here. grad_scale: a one-element fp32 tensor on the device
    every gradient is divided by (the clip), or None. found_inf: a one-element fp32 tensor on the device, or None;
    where it is not 0 the weights and moments are left as they are (GradScaler's route, read on the device), but the
    step counts are still counted up: the caller, once it has read found_inf, takes them back. tables: where the GPU
    path keeps its tables between steps."""
    import torch

    if not params:
        return
    torch._foreach_add_(steps, 1)
    if not params[0].is_cuda:
        torch._fused_adamw_(params, [g.to(p.dtype) for g, p in zip(grads, params)], exp_avgs, exp_avg_sqs, [], steps,
                            lr=lr, beta1=beta1, beta2=beta2, weight_decay=weight_decay, eps=eps, amsgrad=False,
                            maximize=False, grad_scale=grad_scale, found_inf=found_inf)
        return
    count = float(steps[0])
    scalars = (beta1, beta2, eps, lr * weight_decay, lr / (1 - beta1 ** count), math.sqrt(1 - beta2 ** count))
    for kind in _GRAD_DTYPES:
        chosen = [i for i, g in enumerate(grads) if str(g.dtype) == f"torch.{kind}"]
        if chosen:
            _launch([params[i] for i in chosen], [grads[i] for i in chosen], [exp_avgs[i] for i in chosen],
                    [exp_avg_sqs[i] for i in chosen], kind, scalars, grad_scale, found_inf, tables)


def _launch(params, grads, exp_avgs, exp_avg_sqs, kind: str, scalars: tuple, grad_scale, found_inf,
            tables: dict) -> None:
    import torch

    device = params[0].device
    key = (kind, *(t.data_ptr() for t in (*params, *exp_avgs, *exp_avg_sqs)))
    table = tables.get(key)
    if table is None:  # once per set of tensors: [weight, exp_avg, exp_avg_sq, numel] and the first block, a tensor
        numels = [p.numel() for p in params]
        rows = torch.tensor([[p.data_ptr(), m.data_ptr(), v.data_ptr(), n]
                             for p, m, v, n in zip(params, exp_avgs, exp_avg_sqs, numels)], dtype=torch.int64)
        first = torch.tensor([0] + [-(-n // BLOCK) for n in numels], dtype=torch.int64).cumsum(0)
        table = tables[key] = (rows.to(device), first.to(device), int(first[-1]), len(params))
    addresses = torch.tensor([g.data_ptr() for g in grads], dtype=torch.int64)
    if device.type == "cuda":  # from pinned memory: a copy that does not wait for the GPU's queue
        addresses = addresses.pin_memory().to(device, non_blocking=True)
    rows, first, programs, count = table
    from shardlab.strategies.adamw_triton import adamw

    adamw[(programs,)](rows, addresses, first, count, grad_scale if grad_scale is not None else rows,
                       found_inf if found_inf is not None else rows, *scalars, G=_GRAD_DTYPES.index(kind),
                       HAS_SCALE=grad_scale is not None, HAS_FOUND=found_inf is not None, BLOCK=BLOCK,
                       SEARCH=count.bit_length(), num_warps=8)


def requirements(params: list, grads: list) -> str:
    """Why `step` cannot take these tensors ('' where it can): fp32 contiguous weights, gradients of their shape."""
    for p, g in zip(params, grads):
        if str(p.dtype) != "torch.float32" or not p.is_contiguous() or not g.is_contiguous() or g.shape != p.shape:
            return f"a weight of {p.dtype} {tuple(p.shape)} with a gradient of {g.dtype} {tuple(g.shape)}"
        if p.is_cuda and (p.data_ptr() % 16 or g.data_ptr() % 16):  # the kernel reads 16-byte aligned tensors
            return "a tensor not aligned to 16 bytes"
    return ""
