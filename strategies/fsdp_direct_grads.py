"""fsdp's `direct-grads` lever (`--experiments direct-grads`): on one rank, the 16-bit gradients autograd computes go
straight to the AdamW, which upcasts them as it reads them.

On a one-rank mesh FSDP2's reduce sums nothing, yet after each layer's backward it still:
1. copies the layer's 16-bit gradients into one buffer (`chunk_cat`: 4 bytes a parameter moved),
2. casts that buffer to an fp32 gradient for each weight (6 bytes),
and then the clip reads the fp32 gradients for their norm (4), and the fused AdamW reads them (4) and, dividing by the
clip factor, writes them back (4): 22 bytes a parameter for gradients that hold no more than their 16-bit values. On one
H100 that is ~4.7 ms of copies and ~4.8 ms of norm a step on the Llama-3.2-3B shape, and ~16% of AdamW's 39 ms
(results/2026-12-06e-idle/profile-fsdp-3b-callO.txt).

Here, on every FSDP module of a one-rank mesh, the module's post-backward first takes each layer's gradient from its
16-bit weight (`Grads`), so FSDP2 finds none to reduce; the clip takes the norm of the 16-bit gradients in fp32, and
the AdamW (strategies/adamw_kernel.py) reads each one once (2 bytes) and writes nothing back. The values are the ones
torch's path steps with: one rank's reduce is the identity and the cast to fp32 exact. On CPU the step is torch's fused
AdamW on the upcast gradients, the same to the bit as fsdp's default path (tests/strategies/test_fsdp_direct_grads.py);
on a GPU a Triton kernel of the same arithmetic, within fp32 rounding of torch's.

Where FSDP2 already holds an accumulated gradient (a backward without reduce, e.g. under no_sync), where a weight has
its own all-gather (float8) or is offloaded, torch's path runs and the AdamW steps the fp32 `.grad` it leaves.
Accumulation over micro-batches adds each later gradient to an fp32 one, as FSDP2 adds each reduced gradient to the
sharded one.
Like direct-cast it replaces a private method of torch's FSDP2 (FSDPParamGroup.post_backward's entry), so it is refused
under a torch whose code was not read for it. It is refused under bf16-true too: the weights are 16-bit there, and its
AdamW steps fp32 ones.

Measured (results/2026-12-06j-direct-grads.md), against fsdp's former defaults in the same call, both orders:
llama-1b micro-batch 8 +4.0% / +5.1% (one H200) and +4.3% / +4.1% (one H100); the Llama-3.2-3B shape micro-batch 4
+5.1-8.0% (one H200) and +6.9-7.2% (one H100). The peak is the same or lower (without checkpointing it is at the loss,
before any gradient), and 1.8 / 5.4 GiB lower with checkpointing. fsdp's default.
"""
from __future__ import annotations

import functools
import types
from typing import TYPE_CHECKING, Optional

from shardlab.core import switches, trace
from shardlab.strategies import adamw_kernel
from shardlab.strategies._common import clip_divisor

if TYPE_CHECKING:
    import torch


class Grads:
    """The gradients taken from FSDP2 before its reduce, by sharded parameter, until the optimizer steps with them."""

    def __init__(self) -> None:
        self.by_param: dict = {}

    def add(self, param, grad) -> None:
        held = self.by_param.get(param)
        if held is None:
            self.by_param[param] = grad
            return
        if held.dtype != param.dtype:  # a second micro-batch: summed in the weights' dtype, as FSDP2 sums reduced ones
            held = self.by_param[param] = held.to(param.dtype)
        held += grad

    def take(self) -> dict:
        taken, self.by_param = self.by_param, {}
        return taken

    def clear(self) -> None:
        self.by_param = {}


def install(model, grads: Grads) -> int:
    """Each FSDP module of `model` on a one-rank mesh hands its gradients to `grads`; returns how many do."""
    from torch.distributed.fsdp import FSDPModule

    groups = 0
    for module in model.modules():
        group = module._get_fsdp_state()._fsdp_param_group if isinstance(module, FSDPModule) else None
        if group is None or group.mesh_info.shard_mesh_size != 1:
            continue
        group.post_backward = types.MethodType(functools.partial(_post_backward, grads=grads), group)
        groups += 1
    return groups


def _post_backward(self, *unused, grads: Grads) -> None:
    """FSDPParamGroup.post_backward, after each 16-bit gradient of the group is taken (its weight's `.grad` cleared)."""
    from torch.distributed.tensor import DTensor

    taken = 0
    if self.reduce_grads:
        for p in self.fsdp_params:
            if (not hasattr(p, "_unsharded_param") or p.unsharded_accumulated_grad is not None or p.offload_to_cpu
                    or hasattr(p._sharded_local_tensor, "fsdp_pre_all_gather")):
                continue
            grad = p._unsharded_param.grad
            if grad is None or isinstance(grad, DTensor) or grad.shape != p._sharded_local_tensor.shape:
                continue
            p._unsharded_param.grad = None
            grads.add(p.sharded_param, grad.contiguous())
            taken += 1
    if taken and trace.enabled():
        trace.note("fsdp-direct-grads")
    return type(self).post_backward(self, *unused)


def _local(t):
    from torch.distributed.tensor import DTensor

    return t._local_tensor if isinstance(t, DTensor) else t


def clip(model, max_norm: float, grads: Grads, optimizer) -> None:
    """The global norm of every gradient (the ones taken and any `.grad` torch's path left), in fp32, and its clip
    factor as the AdamW's divisor for the coming step. One rank: the local norm is the global one. With clip-in-adamw
    switched off (SHARDLAB_AB=clip-in-adamw), torch's clip instead: every gradient multiplied by max_norm / norm."""
    import torch

    tensors = list(grads.by_param.values()) + [_local(p.grad) for p in model.parameters() if p.grad is not None]
    if not tensors:
        return
    if tensors[0].is_cuda:  # each norm accumulated in fp32 from the 16-bit values, no copy
        norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(tensors, 2, dtype=torch.float32)), 2)
    else:  # CPU: the norm of the fp32 gradients torch's path holds, to the bit
        norm = torch.nn.utils.get_total_norm([t.float() for t in tensors], foreach=True)
    if not switches.on("clip-in-adamw"):  # as clip_grad_norm_: a pass over the gradients, nothing for the AdamW
        torch._foreach_mul_(tensors, torch.clamp(max_norm / (norm.float() + 1e-6), max=1.0))
        return
    optimizer.grad_scale = clip_divisor(norm.float(), max_norm)
    trace.note("fsdp-clip-in-adamw")


def adamw(params, grads: Grads, **options) -> torch.optim.Optimizer:
    """torch's AdamW (its options, its state: step, exp_avg, exp_avg_sq), stepping with the gradients in `grads`."""
    return _optimizer_class()(params, grads, **options)


@functools.cache
def _optimizer_class() -> type:
    import torch

    class DirectGradsAdamW(torch.optim.AdamW):
        """torch's AdamW whose step reads each parameter's gradient from `grads` (else its `.grad`) through
        strategies/adamw_kernel.py; `grad_scale`, where set, divides every gradient (the clip). The state is torch's
        single-tensor AdamW's (a CPU step count), so checkpoints and portable checkpoints read as AdamW's."""

        def __init__(self, params, grads: Grads, **options) -> None:
            super().__init__(params, foreach=False, fused=False, **options)
            self.grads = grads
            self.grad_scale: Optional[torch.Tensor] = None
            self._tables: dict = {}  # the GPU kernel's, kept between steps (strategies/adamw_kernel.py)

        def zero_grad(self, set_to_none: bool = True) -> None:
            super().zero_grad(set_to_none)
            self.grads.clear()

        @torch.no_grad()
        def step(self, closure=None):
            loss = None
            if closure is not None:
                with torch.enable_grad():
                    loss = closure()
            taken = self.grads.take()
            for group in self.param_groups:
                chosen: dict[str, list] = {"params": [], "grads": [], "exp_avgs": [], "exp_avg_sqs": [], "steps": []}
                for p in group["params"]:
                    grad = taken.pop(p, None)
                    if grad is None and p.grad is None:
                        continue
                    state = adamw_kernel.state_of(self, p)
                    for name, t in (("params", p), ("grads", grad if grad is not None else p.grad),
                                    ("exp_avgs", state["exp_avg"]), ("exp_avg_sqs", state["exp_avg_sq"])):
                        chosen[name].append(_local(t))
                    chosen["steps"].append(state["step"])
                why = adamw_kernel.requirements(chosen["params"], chosen["grads"])
                if why:
                    raise RuntimeError(f"direct-grads: its AdamW cannot step {why}; run with --experiments "
                                       f"direct-cast,clip-in-adamw")
                adamw_kernel.step(**chosen, **adamw_kernel.options(group), grad_scale=self.grad_scale,
                                  tables=self._tables)
            if taken:
                raise RuntimeError(f"direct-grads: {len(taken)} gradients taken for weights this AdamW does not step")
            return loss

    return DirectGradsAdamW
