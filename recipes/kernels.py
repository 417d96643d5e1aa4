"""`--kernels liger`: Liger's fused Triton kernels in the Llama model, on CUDA GPUs.

Liger (the `liger-kernel` package; `pip install 'shardlab[gpu]'`) replaces RMSNorm, the rotary
embedding and the SwiGLU MLP with fused Triton kernels, and the output projection + cross-entropy with
a fused linear cross-entropy that never materialises the [tokens, vocab] logits. Parameter names do
not change, so checkpoints and exports are the same as with `--kernels torch`.

Under --compile only the loss is Liger's: Dynamo cannot trace Liger's Triton kernels (on one H200: "'float' object
has no attribute 'to'"), so the compiled decoder layers keep torch's RMSNorm, RoPE and SwiGLU, which Inductor fuses
itself, and the fused linear cross-entropy runs outside them.

The loss runs inside the `lm_head` module's forward (recipes/loss.py FusedLossHead), not in a patched
LlamaForCausalLM.forward as Liger's own `fused_linear_cross_entropy=True` does: ZeRO-3 gathers a
parameter only around its module's forward, and would hand Liger's patched forward an empty weight.
"""
from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Optional

from shardlab.core.errors import UserError

if TYPE_CHECKING:  # `recipe plan` asks default() and check() without importing torch
    import torch


def default(accelerator: str, installed: Optional[bool] = None) -> str:
    """liger on GPUs where the package is installed (fsdp 55,938 -> 68,026 tokens/s on one H200), else torch.
    installed: whether liger-kernel is there (None: look); the memory tests ask for a GPU machine's default."""
    if installed is None:
        installed = importlib.util.find_spec("liger_kernel") is not None
    return "liger" if accelerator == "gpu" and installed else "torch"


def check(accelerator: str) -> None:
    """Refuse --kernels liger where it cannot run: on CPU, without the package."""
    if accelerator != "gpu":
        raise UserError("--kernels liger: Liger's Triton kernels run on CUDA GPUs only; use --kernels torch on CPU")
    if importlib.util.find_spec("liger_kernel") is None:
        raise UserError("--kernels liger: the liger-kernel package is not installed; "
                        "pip install 'shardlab[gpu]' or use --kernels torch")


def use_liger(model: torch.nn.Module, layers: bool = True) -> None:
    """Liger RMSNorm, RoPE and SwiGLU in a Llama model's layers (layers=False: not, for --compile), and its fused
    loss in `lm_head`, in place."""
    from liger_kernel.transformers import apply_liger_kernel_to_llama
    from transformers import LlamaForCausalLM

    from shardlab.recipes.loss import use_fused_loss

    if not isinstance(model, LlamaForCausalLM):  # FSDP2 hands back a subclass of the model's class
        raise UserError(f"--kernels liger: supports Llama models only, this one is {type(model).__name__}; "
                        "use --kernels torch")
    if layers:  # rope patches transformers' module function (this process only); the rest this model's modules
        apply_liger_kernel_to_llama(rope=True, rms_norm=True, swiglu=True, cross_entropy=False,
                                    fused_linear_cross_entropy=False, model=model)
    use_fused_loss(model)
