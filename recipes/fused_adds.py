"""`--fused-adds`: the decoder layers' elementwise adds folded into the kernels beside them.

A Llama decoder layer runs seven full-size adds a step, each a kernel that reads two [tokens, hidden] tensors and
writes one: the two residual adds in forward; in backward, the residual stream's gradient summed with the norm's, twice,
and the input gradient of the linear layers that read one tensor summed over them (q, k and v: two adds; gate and up:
one). On one H100 they were 154 launches and 9.9 ms of a 242 ms fsdp step on llama-1b, 10.6 ms of 375 on the 3B shape
(benchmarks/results/2026-12-06e-idle/profile-*.txt). Here, in place on each decoder layer:

1. q, k, v (and gate, up) sum their input gradient in one buffer with GEMMs that accumulate (addmm into it, beta 1),
   so the sum costs a read of the buffer in the GEMM's epilogue instead of separate add kernels;
2. the attention's residual add goes into the post-attention norm: Liger's fused add + RMSNorm (one kernel forward,
   and one backward that also sums the residual stream's gradient); with torch's kernels the add stays an add;
3. the MLP's residual add goes into down_proj's GEMM (addmm with the residual as its C), forward; its gradient passes
   through unchanged.
What is trained does not change: the same parameters and names, the same sums in another order (fp32 on CPU: losses
and gradients to rounding, tests/recipes/test_fused_adds.py).

Each projection stays its own module called by its parent, so the backends' module hooks (ZeRO-3's fetch and release,
FSDP2's unshard) see what they see without the lever. A linear layer takes the summing path only when its input is the
tensor its layer handed the group (anything else runs nn.Linear's forward) and its input and weight share a dtype (under
autocast with fp32 weights the cast per layer stays autocast's). Not with --compile: Inductor fuses these adds itself.
"""
from __future__ import annotations

import types
from typing import Optional

import torch
import torch.nn.functional as F

from shardlab.core import trace
from shardlab.core.errors import UserError


class _Sum:
    """The input gradient of the linear layers that read one tensor, built up over their backwards: the first writes
    it, each later one accumulates into it, and the last hands it on (the others hand on None, which autograd skips)."""

    __slots__ = ("pending", "grad")

    def __init__(self) -> None:
        self.pending = 0
        self.grad: Optional[torch.Tensor] = None


class _SummedInputLinear(torch.autograd.Function):
    """y = x W^T whose input gradient goes into a shared _Sum."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, total: _Sum) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.total = total
        total.pending += 1
        return F.linear(x, weight)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight = ctx.saved_tensors
        g = grad.reshape(-1, grad.shape[-1])
        grad_weight = g.t().mm(x.reshape(-1, x.shape[-1])) if ctx.needs_input_grad[1] else None
        total, grad_x = ctx.total, None
        if ctx.needs_input_grad[0]:
            if total.grad is None:
                total.grad = g.mm(weight)
            else:
                total.grad.addmm_(g, weight)
        total.pending -= 1
        if total.pending == 0 and total.grad is not None:
            grad_x, total.grad = total.grad.view(x.shape), None
            trace.note("fused-adds-sum")
        return grad_x, grad_weight, None


class _LinearPlusResidual(torch.autograd.Function):
    """residual + x W^T in one GEMM (addmm with the residual as C); the residual's gradient is the output's."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        out = torch.addmm(residual.reshape(-1, residual.shape[-1]), x.reshape(-1, x.shape[-1]), weight.t())
        return out.view(residual.shape)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight = ctx.saved_tensors
        g = grad.reshape(-1, grad.shape[-1])
        grad_x = g.mm(weight).view(x.shape) if ctx.needs_input_grad[0] else None
        grad_weight = g.t().mm(x.reshape(-1, x.shape[-1])) if ctx.needs_input_grad[1] else None
        return grad_x, grad_weight, grad


def _same_dtype(x: torch.Tensor, weight: torch.Tensor) -> bool:
    if x.dtype != weight.dtype:
        return False
    return not torch.is_autocast_enabled(x.device.type) or x.dtype == torch.get_autocast_dtype(x.device.type)


def _grouped_linear(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    group = self._shardlab_group
    if group is None or x is not group[0] or not _same_dtype(x, self.weight):
        return F.linear(x, self.weight, self.bias)
    return _SummedInputLinear.apply(x, self.weight, group[1])


def _down_proj(self: torch.nn.Linear, x: torch.Tensor, residual: Optional[torch.Tensor] = None) -> torch.Tensor:
    if residual is None or not (_same_dtype(x, self.weight) and residual.dtype == x.dtype):
        out = F.linear(x, self.weight, self.bias)
        return out if residual is None else residual + out
    return _LinearPlusResidual.apply(x, self.weight, residual)


def _liger_add_norm(self: torch.nn.Module, x: torch.Tensor, residual: Optional[torch.Tensor] = None):
    """norm(residual + x) and residual + x, in one Liger kernel; norm(x) without a residual."""
    from liger_kernel.ops import LigerFusedAddRMSNormFunction

    if residual is None or x.dtype != residual.dtype:  # Liger's kernel adds in the input's dtype
        return _torch_add_norm(self, x, residual)
    return LigerFusedAddRMSNormFunction.apply(x, residual, self.weight, self.variance_epsilon, self.offset,
                                              self.casting_mode, self.in_place)


def _torch_add_norm(self: torch.nn.Module, x: torch.Tensor, residual: Optional[torch.Tensor] = None):
    if residual is None:
        return self._shardlab_norm(x)
    total = residual + x
    return self._shardlab_norm(total), total


def _mlp(self: torch.nn.Module, x: torch.Tensor, residual: Optional[torch.Tensor] = None) -> torch.Tensor:
    self.gate_proj._shardlab_group = self.up_proj._shardlab_group = (x, _Sum())
    try:
        a = self._shardlab_act(self.gate_proj(x), self.up_proj(x))
    finally:
        self.gate_proj._shardlab_group = self.up_proj._shardlab_group = None
    return self.down_proj(a, residual)


def _layer(self: torch.nn.Module, hidden_states: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    if args:  # transformers hands a layer's other inputs by name; anything else runs its own forward
        return self._shardlab_forward(hidden_states, *args, **kwargs)
    attn = self.self_attn
    h = self.input_layernorm(hidden_states)
    attn.q_proj._shardlab_group = attn.k_proj._shardlab_group = attn.v_proj._shardlab_group = (h, _Sum())
    try:
        h, _ = attn(hidden_states=h, **kwargs)
    finally:
        attn.q_proj._shardlab_group = attn.k_proj._shardlab_group = attn.v_proj._shardlab_group = None
    h, residual = self.post_attention_layernorm(h, hidden_states)
    return self.mlp(h, residual)


def _liger_swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    from liger_kernel.ops import LigerSiLUMulFunction

    return LigerSiLUMulFunction.apply(gate, up, 1.0, 1.0)


def use(model: torch.nn.Module, liger: bool) -> int:
    """Fold the adds of every decoder layer of a Llama model, in place; liger: Liger's kernels are in its layers
    (recipes/kernels.py use_liger), so the attention's residual add joins Liger's RMSNorm. Returns the layers
    changed."""
    from transformers import LlamaForCausalLM

    if not isinstance(model, LlamaForCausalLM):
        raise UserError(f"--fused-adds: supports Llama models only, this one is {type(model).__name__}; "
                        "use --no-fused-adds")
    layers = model.model.layers
    for layer in layers:
        attn, mlp = layer.self_attn, layer.mlp
        linears = (attn.q_proj, attn.k_proj, attn.v_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj)
        if any(p.bias is not None for p in linears):
            raise UserError("--fused-adds: this model's projections have biases (attention_bias or mlp_bias); "
                            "use --no-fused-adds")
        for p in linears[:5]:
            p._shardlab_group = None
            p.forward = types.MethodType(_grouped_linear, p)
        mlp.down_proj.forward = types.MethodType(_down_proj, mlp.down_proj)
        mlp._shardlab_act = _liger_swiglu if liger else (lambda gate, up, act=mlp.act_fn: act(gate) * up)
        mlp.forward = types.MethodType(_mlp, mlp)
        norm = layer.post_attention_layernorm
        norm._shardlab_norm = norm.forward
        norm.forward = types.MethodType(_liger_add_norm if liger else _torch_add_norm, norm)
        layer._shardlab_forward = layer.forward
        layer.forward = types.MethodType(_layer, layer)
    return len(layers)
