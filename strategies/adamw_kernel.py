"""One AdamW step of a tensor whose gradient may be 16-bit: fp32 weights and moments, the gradient upcast as it is read.

torch's fused AdamW wants the gradient in the weight's dtype, so a 16-bit gradient first becomes an fp32 copy (a read of
2 bytes and a write of 4 a parameter), which the kernel then reads (4 more), and under `grad_scale` writes back (4
more). Here one kernel reads the 16-bit gradient once (2 bytes) and writes nothing back: 26 bytes a parameter move
where torch's path moves 40 (fsdp's direct-grads lever, strategies/fsdp_direct_grads.py).

- On a GPU: a Triton kernel, the arithmetic of torch's fused AdamW (aten/src/ATen/native/cuda/fused_adam_utils.cuh,
  ADAMW mode) in fp32: decay, both moments, then the bias-corrected step. The bias corrections are taken on the host in
  double from the step count, as torch's single-tensor AdamW takes them. Against torch's fused kernel fed the upcast
  gradient: within a few fp32 roundings (tests/strategies/test_fsdp_direct_grads.py, on the GPU).
- Elsewhere (CPU): torch's own fused AdamW on the upcast gradient, so a CPU run steps as fsdp's default path does, to
  the bit. The copy costs nothing that matters there.
"""
from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    import torch

BLOCK = 2048  # elements a program: 8 KiB of each fp32 tensor


def step(param: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor, step_tensor,
         *, lr: float, beta1: float, beta2: float, eps: float, weight_decay: float,
         grad_scale: Optional[torch.Tensor]) -> None:
    """Step `param` (plain fp32 tensors, `step_tensor` a CPU float tensor already counting this step) in place.
    grad_scale: a one-element fp32 tensor on the parameter's device every gradient is divided by (the clip), or None."""
    import torch

    if param.is_cuda:
        n = param.numel()
        if n == 0:
            return
        count = float(step_tensor)
        bias1, bias2 = 1 - beta1 ** count, 1 - beta2 ** count
        _kernel()[(triton_cdiv(n),)](
            param, grad, exp_avg, exp_avg_sq, grad_scale if grad_scale is not None else param, n,
            beta1, beta2, eps, lr * weight_decay, lr / bias1, math.sqrt(bias2),
            HAS_SCALE=grad_scale is not None, BLOCK=BLOCK, num_warps=8)
        return
    torch._fused_adamw_([param], [grad.to(param.dtype)], [exp_avg], [exp_avg_sq], [], [step_tensor], lr=lr, beta1=beta1,
                        beta2=beta2, weight_decay=weight_decay, eps=eps, amsgrad=False, maximize=False,
                        grad_scale=grad_scale, found_inf=None)


def triton_cdiv(n: int) -> int:
    return -(-n // BLOCK)


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def adamw(p_ptr, g_ptr, m_ptr, v_ptr, scale_ptr, n, beta1, beta2, eps, decay, step_size, bias2_sqrt,
              HAS_SCALE: tl.constexpr, BLOCK: tl.constexpr):
        offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        g = tl.load(g_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        if HAS_SCALE:
            g = g / tl.load(scale_ptr)
        p = tl.load(p_ptr + offsets, mask=mask, other=0.0)
        m = tl.load(m_ptr + offsets, mask=mask, other=0.0)
        v = tl.load(v_ptr + offsets, mask=mask, other=0.0)
        p = p - decay * p  # decoupled weight decay (decay: lr x weight_decay)
        m = beta1 * m + (1.0 - beta1) * g
        v = beta2 * v + (1.0 - beta2) * g * g
        p = p - step_size * m / (tl.sqrt(v) / bias2_sqrt + eps)
        tl.store(p_ptr + offsets, p, mask=mask)
        tl.store(m_ptr + offsets, m, mask=mask)
        tl.store(v_ptr + offsets, v, mask=mask)

    return adamw
