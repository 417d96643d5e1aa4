"""Per-rank memory estimate for a Llama training step under any registered strategy.

Parameter counts come from the model config on the meta device (accelerate's init_empty_weights), so a
70B config plans on a laptop. Model states come from each strategy (`Strategy.model_state_bytes`, each
backend's formula beside its adapter in strategies/); activations, logits and the fixed overhead are shared here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Optional

from shardlab.core.precision import compute_bytes as _compute_bytes


GiB = 2**30
# Allocations outside model states, activations and logits that max_memory_allocated still counts under
# DDP and DeepSpeed (cuBLAS workspace, the loss's reduction buffers, DeepSpeed's bucket buffers, allocator
# rounding). Set to 512 MiB, not measured on its own: with it, the 24 DDP/ZeRO points measured on one
# H200 (results/2026-12-02-memory-h200.md) fall within -7.1% .. +9.0%. FSDP2 has its own, measured (0).
FIXED_OVERHEAD_BYTES = 512 * 2**20


@dataclass(frozen=True)
class Shape:
    """What the estimate needs to know about the model."""

    params: int
    largest_layer_params: int  # largest parameter count held directly by one module (DeepSpeed's convention)
    decoder_layer_params: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    tied: bool  # embeddings and lm_head share one matrix, counted once in `params`
    head_dim: int = 0  # width of one attention head (config.head_dim; hidden / heads where not given)

    def describe(self) -> dict:
        """The model's facts as `recipe plan --json`, `recipe models` and summary.json report them."""
        return {"params": self.params, "layers": self.layers, "hidden": self.hidden, "heads": self.heads,
                "kv_heads": self.kv_heads, "intermediate": self.intermediate, "vocab": self.vocab, "tied": self.tied}


@dataclass(frozen=True)
class Workload:
    """The run as the estimate sees it."""

    micro_batch_size: int
    seq_len: int
    activation_checkpointing: bool
    precision: str
    gpus_per_node: int
    num_nodes: int
    chunked_loss: bool = False

    @property
    def world_size(self) -> int:
        return self.gpus_per_node * self.num_nodes

    @property
    def compute_bytes(self) -> int:
        return _compute_bytes(self.precision)


@dataclass(frozen=True)
class ModelStates:
    """Bytes per rank for parameters, gradients and optimizer states (and their CPU side)."""

    gpu: int
    cpu: int
    step_only: int = 0
    """Part of `gpu` that exists only during the optimizer step, when activations are already freed
    (ZeRO's fp32 gradient partition): the peak is max(backward, step), not their sum."""
    fp32_residual: bool = False
    """Autocast over fp32 parameters (DDP): the residual stream and norm inputs stay fp32."""
    runtime_buffers: int = 0
    """GPU buffers outside the backend's own model-state estimate (ZeRO-3 parameter offload fetches up to
    stage3_max_live_parameters parameters back to the GPU)."""
    fixed_overhead: Optional[int] = None
    """This backend's measured constant; None: FIXED_OVERHEAD_BYTES."""


@dataclass
class Estimate:
    gpu_bytes: int
    cpu_bytes: int
    parts: dict[str, int] = field(default_factory=dict)


def shape_of(config) -> Shape:
    """Counts unique parameters of a transformers Llama config on the meta device: nothing is allocated."""
    return _shape_of(config.to_json_string())


@lru_cache(maxsize=32)
def _shape_of(config_json: str) -> Shape:
    import json

    from accelerate import init_empty_weights
    from transformers import LlamaConfig, LlamaForCausalLM

    try:  # transformers >= 5
        from transformers.initialization import no_init_weights
    except ImportError:
        from transformers.modeling_utils import no_init_weights

    config = LlamaConfig(**json.loads(config_json))
    with init_empty_weights(), no_init_weights():  # no random init of meta tensors: 5x faster
        model = LlamaForCausalLM(config)
    model.tie_weights()  # transformers 5 leaves a model built under init_empty_weights untied
    params = sum(p.numel() for p in model.parameters())  # unique: parameters() yields a shared matrix once
    largest = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
    layer = sum(p.numel() for p in model.model.layers[0].parameters())
    return Shape(params=params, largest_layer_params=largest, decoder_layer_params=layer,
                 hidden=config.hidden_size, layers=config.num_hidden_layers, heads=config.num_attention_heads,
                 kv_heads=config.num_key_value_heads, intermediate=config.intermediate_size, vocab=config.vocab_size,
                 tied=model.lm_head.weight is model.model.embed_tokens.weight,
                 head_dim=getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)


def activation_bytes(s: Shape, w: Workload, fp32_residual: bool = False) -> int:
    """Activations kept for backward, per rank.

    Per token and decoder layer, after Korthikanti et al. 2022 ("Reducing Activation Recomputation in
    Large Transformer Models", sec. 4.1: 34·h bytes for a GPT layer with flash attention), recounted for
    Llama in 16-bit: q/k/v-projection input, q, k, v, attention output and o-projection input
    (about 8h + 4·kv); SwiGLU MLP input 2h plus gate, up, SiLU and product (8·intermediate); two RMSNorms
    that keep their 16-bit input and an fp32 copy (12h). Attention scores are not stored (SDPA).
    Activation checkpointing per decoder layer keeps each layer's input (2h) plus one layer recomputed.
    Autocast over fp32 parameters keeps the two norm inputs in fp32 (+4h).
    """
    kv = s.kv_heads * (s.head_dim or s.hidden // s.heads)
    scale = w.compute_bytes / 2
    per_layer = (22 * s.hidden + 8 * s.intermediate + 4 * kv) * scale + (4 * s.hidden if fp32_residual else 0)
    tokens = w.micro_batch_size * w.seq_len
    if w.activation_checkpointing:
        return int(tokens * (s.layers * 2 * s.hidden * scale + per_layer))
    return int(tokens * s.layers * per_layer)


CHUNK_TOKENS = 4096  # recipes/loss.py's chunk


def logits_bytes(s: Shape, w: Workload) -> int:
    """The logits and the loss's buffers: 16-bit logits, their fp32 upcast and log-softmax, fp32 gradient
    (transformers' ForCausalLMLoss upcasts logits to fp32 before cross-entropy): 2 + 4 + 4 bytes per value.
    The chunked loss (recipes/loss.py) holds one chunk's worth at a time."""
    per_value = 12 if w.compute_bytes == 4 else 10
    tokens = w.micro_batch_size * w.seq_len
    return int(min(tokens, CHUNK_TOKENS if w.chunked_loss else tokens) * s.vocab * per_value)


def estimate(states: Optional[ModelStates], s: Shape, w: Workload) -> Optional[Estimate]:
    """The peak per rank from a strategy's model states (Strategy.estimate calls this); None when the strategy
    declares no memory model (it is then never auto-selected)."""
    if states is None:
        return None
    act, logits = activation_bytes(s, w, states.fp32_residual), logits_bytes(s, w)
    backward = states.gpu - states.step_only + act + logits
    overhead = FIXED_OVERHEAD_BYTES if states.fixed_overhead is None else states.fixed_overhead
    parts = {"model_states": states.gpu, "runtime_buffers": states.runtime_buffers, "activations": act,
             "logits": logits, "fixed_overhead": overhead, "peak_phase_backward": int(backward >= states.gpu)}
    gpu = max(backward, states.gpu) + states.runtime_buffers + overhead
    return Estimate(gpu_bytes=gpu, cpu_bytes=states.cpu, parts=parts)


def master_bytes(w: Workload) -> int:
    """Bytes of a master weight: 2 under bf16-true (no fp32 copy), else 4."""
    return 2 if w.precision.endswith("-true") and w.precision != "32-true" else 4
