"""Per-rank memory estimate for a Llama training step under any registered strategy.

Parameter counts come from the model config's sizes, module by module as transformers' LlamaForCausalLM builds
them (nothing is built, nor torch imported), so a 405B config plans on a laptop in milliseconds. Model states come
from each strategy (`Strategy.model_state_bytes`, each backend's formula beside its adapter in strategies/);
activations, logits and the fixed overhead are shared here.
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
    kernels: str = "torch"
    """`liger`: Liger's fused RMSNorm, SwiGLU, RoPE and linear cross-entropy (what they keep differs from torch's)."""
    compiled: Optional[bool] = False
    """torch.compile per decoder layer (None: not decided yet, each preset's default) (with torch kernels: the fused graph keeps fewer norm intermediates)."""
    float8: bool = False
    """Decoder layers' linears multiply in float8 (torchao): their float8 casts are transient; under autocast no 16-bit
    copy of their weights is cached (strategies/ddp.py)."""
    offload_ratio: float = 1.0
    """ZeRO-3 optimizer offload: the share of the optimizer on the CPU; the rest (and its fp32 gradients) stays on the GPU."""
    experiments: Optional[tuple[str, ...]] = None
    """The preset's levers (--experiments) as the run resolved them; None: each preset's defaults (zero3's fused-step
    keeps no 16-bit copy of the gradients in the step, strategies/deepspeed.py)."""
    grad_accum: int = 1
    """Micro-batches per optimizer step: above 1 the gradients of the step's earlier micro-batches are live through the
    next forward, where ddp and fsdp (ModelStates.gradients) otherwise have freed theirs after the step."""

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
    gradient_buckets: int = 0
    """What lives beside a recomputed layer in backward and not at the loss's peak: buffers that fill only while
    decoder layers' gradients are reduced (ZeRO's buckets), and what else the backend holds through backward."""
    after_loss: int = 0
    """Part of `gpu` made only once backward has passed the loss (the output matrix's gradient, a decoder layer's
    gradient in flight): not yet live while torch's loss holds its logits (Liger's fused loss makes the output
    matrix's gradient inside forward, so under Liger it is counted with the loss)."""
    gradients: int = 0
    """Part of `gpu`: the gradients, freed right after each optimizer step (Strategy.release_gradients) and made
    again in backward, layer by layer, as the activations that made them are freed: not live through forward nor at
    the loss; all of them only at the end of backward (with a recomputed layer) and in the step."""
    forward_only: int = 0
    """GPU bytes held only through forward (autocast's cache of 16-bit weights, freed when forward ends)."""
    fixed_overhead: Optional[int] = None
    """This backend's measured constant; None: FIXED_OVERHEAD_BYTES."""


@dataclass
class Estimate:
    gpu_bytes: int
    cpu_bytes: int
    parts: dict[str, int] = field(default_factory=dict)


# What the count reads of a Llama config (a transformers LlamaConfig's attributes, or the same keys of a dict).
LLAMA_FIELDS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                "head_dim", "vocab_size", "tie_word_embeddings", "attention_bias", "mlp_bias")


def shape_of(config) -> Shape:
    """Unique parameters of a Llama model from its config: a transformers LlamaConfig, or a dict of LLAMA_FIELDS with
    LlamaConfig's defaults filled (recipes/model.py llama_fields, read without importing transformers)."""
    return _shape_of(*(config[k] if isinstance(config, dict) else getattr(config, k) for k in LLAMA_FIELDS))


@lru_cache(maxsize=32)
def _shape_of(h: int, i: int, layers: int, heads: int, kv_heads: int, head_dim: int, vocab: int, tied: bool,
              attention_bias: bool, mlp_bias: bool) -> Shape:
    """Module by module as LlamaForCausalLM holds them (checked equal to counting a model built on the meta device,
    for every shipped shape and the bias and tying variants, in tests/recipes/test_startup.py): per decoder layer
    q, k, v and o projections (biases under attention_bias), gate, up and down (biases under mlp_bias), two RMSNorms;
    then the embeddings, lm_head (the same matrix, counted once, when tied) and the final norm."""
    q, kv = heads * head_dim, kv_heads * head_dim
    q_proj, kv_proj = h * q + (q if attention_bias else 0), h * kv + (kv if attention_bias else 0)
    o_proj = q * h + (h if attention_bias else 0)
    gate_up, down = h * i + (i if mlp_bias else 0), i * h + (h if mlp_bias else 0)
    layer = q_proj + 2 * kv_proj + o_proj + 2 * gate_up + down + 2 * h
    return Shape(params=layers * layer + (1 if tied else 2) * vocab * h + h,
                 largest_layer_params=max(vocab * h, q_proj, kv_proj, o_proj, gate_up, down),  # held by one module
                 decoder_layer_params=layer, hidden=h, layers=layers, heads=heads, kv_heads=kv_heads, intermediate=i,
                 vocab=vocab, tied=bool(tied), head_dim=head_dim)


def layer_activation_bytes(s: Shape, w: Workload, fp32_residual: bool = False) -> int:
    """Bytes one decoder layer keeps for backward, per token, counted from the allocator's history at the peak
    of real runs (one H200, llama-1b, micro-batch 8: benchmarks/memory_snapshot.py names each tensor;
    results/2026-12-03-memory-h200.md). In the compute dtype (c = 2 bytes in 16-bit):
    - Liger kernels (not compiled; under --compile only the loss is Liger's): the two RMSNorm outputs (2h c;
      Liger's norm keeps its input, the residual, and a per-row rstd), q (h c), k and v (2 kv c), the attention
      output (h c) and its fp32 log-sum-exp (4 heads), the two residual sums (2h c), gate and up (2i c; Liger's
      SwiGLU recomputes SiLU) and their product (i c):
      12h + 6i + 4kv bytes in bf16, 59,648 per token for llama-1b (measured 59,660).
    - torch eager: as above plus each norm's fp32 copy and SiLU's output: 22h + 8i + 4kv (Korthikanti et al.
      2022's count redone for Llama); under torch.compile of every layer: 14h + 6i + 4kv, fitted to the one point
      measured since the compile fix of 2026-12-05 (llama-1b, micro-batch 8, no checkpointing: 38.70 GiB,
      results/2026-12-05d-h200.md): the fused graph keeps about what Liger's kernels keep. The count before, 16h + 8i
      + 4kv, was fitted to runs in which Hugging Face's key/value cache made Dynamo compile only 8 of the layers.
    - autocast over fp32 parameters (DDP): the residual stream and the norm outputs stay fp32, and autocast
      keeps a 16-bit copy of each norm output for the projections: +12h (Liger), +4h (torch, whose norm copies
      are already fp32)."""
    kv = s.kv_heads * (s.head_dim or s.hidden // s.heads)
    c = w.compute_bytes
    h, i = s.hidden, s.intermediate
    if w.kernels == "liger" and not w.compiled:  # compiled layers run torch's kernels, Liger only the loss
        per = (6 * h + 3 * i + 2 * kv) * c + 4 * s.heads + (12 * h if fp32_residual else 0)
    else:
        per = ((7 * h + 3 * i if w.compiled else 11 * h + 4 * i) + 2 * kv) * c + (4 * h if fp32_residual else 0)
    return int(per)


def activation_bytes(s: Shape, w: Workload, fp32_residual: bool = False) -> int:
    """Activations kept for backward, per rank: every layer's (above), or with activation checkpointing per
    decoder layer, each layer's input only (the residual stream: c bytes, fp32 under DDP's autocast)."""
    tokens = w.micro_batch_size * w.seq_len
    if w.activation_checkpointing:
        return int(tokens * s.layers * s.hidden * (4 if fp32_residual else w.compute_bytes))
    return int(tokens * s.layers * layer_activation_bytes(s, w, fp32_residual))


def recompute_bytes(s: Shape, w: Workload, fp32_residual: bool = False) -> int:
    """With activation checkpointing, what backward adds while it recomputes one layer: that layer's activations
    and the gradients of its input and output."""
    if not w.activation_checkpointing:
        return 0
    tokens = w.micro_batch_size * w.seq_len
    return int(tokens * (layer_activation_bytes(s, w, fp32_residual) + 2 * s.hidden * w.compute_bytes))


CHUNK_TOKENS = 4096  # recipes/loss.py's chunk


def logits_bytes(s: Shape, w: Workload, weight_bytes: Optional[int] = None) -> int:
    """The output projection and the loss at their peak.
    - torch: 16-bit logits, their fp32 upcast and log-softmax (transformers' ForCausalLMLoss upcasts before
      cross-entropy): 2 + 4 + 4 bytes per value (12 in fp32) -- the chunked loss (recipes/loss.py) holds one
      chunk's worth at a time;
    - Liger's fused linear cross-entropy never holds the logits: the gradient of its input (tokens x h, and
      shardlab's flattened copy of it), the gradient of the output matrix in the weight's dtype (vocab x h;
      weight_bytes: 4 under DDP's fp32 parameters), and one chunk of logits (Liger sizes chunks so that
      chunk x vocab ~ tokens x h, rounded up to a power of two), as the allocator's history showed."""
    tokens = w.micro_batch_size * w.seq_len
    c = w.compute_bytes
    if w.kernels == "liger":
        inc = -(-s.vocab // s.hidden)
        chunk = min(tokens, 1 << max(0, (-(-tokens // inc) - 1).bit_length()))
        return int(2 * tokens * s.hidden * c + s.vocab * s.hidden * (weight_bytes or c) + chunk * s.vocab * c + 4 * tokens)
    per_value = 12 if c == 4 or w.activation_checkpointing else 10
    return int(min(tokens, CHUNK_TOKENS if w.chunked_loss else tokens) * s.vocab * per_value)


def estimate(states: Optional[ModelStates], s: Shape, w: Workload) -> Optional[Estimate]:
    """The peak per rank from a strategy's model states (Strategy.estimate calls this); None when the strategy
    declares no memory model (it is then never auto-selected).

    Three phases: forward and the start of backward (model states without the step-only part and, without
    accumulation, without the gradients freed after each step; activations, then the larger of the loss's buffers at
    the end of forward and, with checkpointing, one recomputed layer in backward), the end of backward (every
    gradient made, a recomputed layer) and the optimizer step (all model states, activations freed). The peak is the
    largest, plus runtime buffers and the backend's fixed overhead."""
    if states is None:
        return None
    act = activation_bytes(s, w, states.fp32_residual)
    logits = logits_bytes(s, w, 4 if states.fp32_residual else None)
    recompute = recompute_bytes(s, w, states.fp32_residual)
    freed = states.gradients if w.grad_accum <= 1 else 0  # accumulating: the earlier micro-batches' gradients stay
    live = states.gpu - states.step_only - freed  # what forward and the loss find
    at_loss = live - (states.after_loss if w.kernels == "torch" else 0)
    forward = at_loss + states.forward_only + act + logits
    backward = live + act + max(logits - (states.after_loss if w.kernels == "torch" else 0),
                                recompute + states.gradient_buckets)
    end_of_backward = states.gpu - states.step_only + recompute + states.gradient_buckets  # every gradient made
    overhead = FIXED_OVERHEAD_BYTES if states.fixed_overhead is None else states.fixed_overhead
    parts = {"model_states": states.gpu, "gradients": states.gradients, "runtime_buffers": states.runtime_buffers,
             "activations": act, "logits": logits, "recompute": recompute, "fixed_overhead": overhead,
             "peak_phase_backward": int(max(forward, backward, end_of_backward) >= states.gpu)}
    gpu = max(forward, backward, end_of_backward, states.gpu) + states.runtime_buffers + overhead
    return Estimate(gpu_bytes=gpu, cpu_bytes=states.cpu, parts=parts)


def master_bytes(w: Workload) -> int:
    """Bytes of a master weight: 2 under bf16-true (no fp32 copy), else 4."""
    return 2 if w.precision.endswith("-true") and w.precision != "32-true" else 4
