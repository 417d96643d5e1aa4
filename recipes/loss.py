"""Chunked cross-entropy: the causal-LM loss without materialising the full logits.

Hugging Face's LlamaForCausalLM computes logits for every token ([batch, seq, vocab], 16-bit under
autocast), upcasts them to fp32 and then takes the cross-entropy: at micro-batch 8, seq 2048 and a
32k vocabulary that is 1 GiB of bf16 logits, 2 GiB of fp32 copies and as much again for their
gradients. Here the output projection and the loss run per chunk of tokens under activation
checkpointing, so at most one chunk's logits exist at a time (recomputed in backward); the loss is the
same mean over the same tokens (summed per chunk in fp32).

With labels (chat and instruction data) a token whose label is -100 is no target, and the loss is the targets' summed
loss over a divisor the caller gives (recipes/module.py: so that an optimizer step's loss is the mean over the targets
of its whole global batch), in all three paths: Hugging Face's own loss (`loss_function`, given `num_items_in_batch`
as its Trainer does), the chunked head and Liger's fused one. Labels are aligned with input_ids, as Hugging Face's:
the logits at position t are scored against the label at t + 1.

It lives *inside* the `lm_head` module's forward so that every backend sees its weight used where it
expects: ZeRO-3 gathers it around that call (and again for the recompute), FSDP2's root unit holds it
unsharded. The module keeps its class's parameter names, so exports and checkpoints are unchanged.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from shardlab.core.memory import CHUNK_TOKENS  # one chunk's fp32 logits: 0.5 GiB at a 32k vocabulary


def _chunk_loss(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(F.linear(hidden, weight).float(), targets, reduction="sum")


class ChunkedLossHead(torch.nn.Linear):
    """An `lm_head` that returns the mean next-token loss while `targets` is set, else plain logits."""

    targets: Optional[torch.Tensor] = None
    divisor: Optional[torch.Tensor] = None
    """None: the mean over every target; else the targets' (labels other than -100) summed loss over it."""

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.targets is None:  # generation, export checks
            return super().forward(hidden)
        targets = self.targets[:, 1:].reshape(-1)  # token t predicts token t + 1, as HF's loss shifts
        hidden = hidden[:, :-1].reshape(-1, hidden.shape[-1])
        total = hidden.new_zeros((), dtype=torch.float32)
        for i in range(0, targets.numel(), CHUNK_TOKENS):  # cross_entropy's ignore_index is -100
            total = total + checkpoint(_chunk_loss, hidden[i:i + CHUNK_TOKENS], self.weight,
                                       targets[i:i + CHUNK_TOKENS], use_reentrant=False)
        return total / (targets.numel() if self.divisor is None else self.divisor)


class FusedLossHead(ChunkedLossHead):
    """An `lm_head` whose loss is Liger's fused linear cross-entropy (Triton, CUDA): logits are never materialised."""

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.targets is None:
            return F.linear(hidden, self.weight, self.bias)
        from liger_kernel.transformers.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyLoss

        targets = self.targets[:, 1:].reshape(-1)
        hidden = hidden[:, :-1].reshape(-1, hidden.shape[-1])
        if self.divisor is None:
            return LigerFusedLinearCrossEntropyLoss()(self.weight, hidden, targets)
        return LigerFusedLinearCrossEntropyLoss(ignore_index=-100, reduction="sum")(self.weight, hidden, targets) / self.divisor


def use_fused_loss(model: torch.nn.Module) -> None:
    """Turn a causal LM's `lm_head` (an nn.Linear) into a FusedLossHead in place (recipes/kernels.py)."""
    if type(model.lm_head) not in (torch.nn.Linear, ChunkedLossHead):
        raise TypeError(f"fused loss needs lm_head to be torch.nn.Linear, got {type(model.lm_head).__name__}")
    model.lm_head.__class__ = FusedLossHead


def use_chunked_loss(model: torch.nn.Module) -> None:
    """Turn a causal LM's `lm_head` (an nn.Linear) into a ChunkedLossHead in place."""
    if type(model.lm_head) is not torch.nn.Linear:
        raise TypeError(f"chunked loss needs lm_head to be torch.nn.Linear, got {type(model.lm_head).__name__}")
    model.lm_head.__class__ = ChunkedLossHead


def causal_lm_loss(model: torch.nn.Module, input_ids: torch.Tensor, labels: Optional[torch.Tensor] = None,
                   divisor: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The next-token loss, through the chunked or fused head if the model has one: without labels the mean over
    every token; with labels (-100: not a target) the targets' summed loss over `divisor`.

    use_cache=False: a Llama config says use_cache=True, and Hugging Face then builds a key/value cache in every training
    forward that is not checkpointed. Each decoder layer writes its own slot of that cache, so torch.compile of the
    layers guarded on the slot and compiled the shared layer code once per layer until its recompile limit (8): the
    later layers of llama-1b (22) ran uncompiled, under --compile and --float8 alike (tests/recipes/test_speed_options.py)."""
    head = model.lm_head
    if not isinstance(head, ChunkedLossHead):
        if labels is None:
            return model(input_ids=input_ids, labels=input_ids, use_cache=False).loss
        # Hugging Face's causal-LM loss (it shifts the labels), summed over num_items_in_batch. Called on the logits
        # rather than through forward(**kwargs), which would hand num_items_in_batch to every decoder layer.
        logits = model(input_ids=input_ids, use_cache=False).logits
        return model.loss_function(logits=logits, labels=labels, vocab_size=logits.shape[-1], num_items_in_batch=divisor)
    if labels is not None and divisor is None:
        raise ValueError("labels need a divisor")
    head.targets, head.divisor = (input_ids if labels is None else labels), divisor
    try:
        return model(input_ids=input_ids, use_cache=False).logits  # the head returned the loss in place of logits
    finally:
        head.targets = head.divisor = None
