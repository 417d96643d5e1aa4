"""FSDP2 (`fully_shard`, per-parameter DTensor sharding) through Lightning's ModelParallelStrategy.

Why FSDP2 and not FSDP1 (`FSDPStrategy`): PyTorch has deprecated FSDP1 in favour of `fully_shard`;
FSDP2 runs on stock Lightning on CPU and GPU without subclassing, shards each parameter on dim 0
(so the memory estimate is plain arithmetic), and composes with torch.compile per decoder layer.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from shardlab.core import memory, switches
from shardlab.core.memory import ModelStates, Shape, Workload
from shardlab.core.external import accelerate_base
from shardlab.core.strategy import Preset, Capabilities, ModelSource, PrecisionPlan, RunContext, Strategy, dtype_name
from shardlab.strategies import fsdp_clip_in_adamw as clip_in_adamw
from shardlab.strategies import fsdp_direct_cast as direct_cast
from shardlab.strategies import fsdp_direct_grads as direct_grads
from shardlab.strategies._common import adam_step, ensure_adam_state, is_rank_zero

if TYPE_CHECKING:  # torch and Lightning load when a run builds the strategy, not when the registry lists it
    import torch
    from lightning.pytorch.strategies import ModelParallelStrategy


# Model states per rank. Byte counts per parameter after the ZeRO paper (Rajbhandari et al. 2020, sec. 3:
# mixed-precision Adam holds 2 + 2 + 12 = 16 bytes per parameter).
def fsdp_states(s: Shape, w: Workload, offload: bool, direct_grads: bool = False) -> ModelStates:
    """FSDP2: master params, grads and Adam states sharded over the world (4 masters' worth of bytes), and
    the root unit (embeddings, lm_head, final norm) unsharded in the compute dtype: FSDP keeps the root
    gathered from forward through backward, while each decoder layer is resharded after its forward, so
    at the peak (the logits and the loss, end of forward / start of backward) no decoder layer is gathered.
    Offload moves the sharded part to CPU. direct-grads on one rank: the gradients stay in the compute dtype until the
    step (strategies/fsdp_direct_grads.py), 2 bytes a parameter instead of a master's 4 under bf16-mixed.
    CPU while loading: the model is built on the meta device and sharded, then each rank reads only its rows
    of one tensor at a time from the safetensors files (strategies/fsdp.py load_shards): per rank, one slice
    of the largest tensor as read and in fp32; measured on CPU in tests/strategies/test_loading.py.
    Fixed overhead: measured 0. On one H200 (llama-1b, results/2026-12-02-memory-h200.md), the four
    fsdp_offload points (micro-batch 4 and 8, checkpointing on and off) sit -105..+8 MiB from sharded
    states + root + activations + logits, without the 512 MiB the other backends show."""
    m = memory.master_bytes(w)
    grad = w.compute_bytes if direct_grads and w.world_size == 1 and not offload else m
    sharded = int(s.params * (3 * m + grad) / w.world_size)
    root = s.params - s.layers * s.decoder_layer_params
    # the root gathered, and the output matrix's gradient, unsharded in 16-bit from the loss's backward until the
    # root's reduce-scatter at the end of backward (the tied 3B shape: +0.73 GiB, measured under fsdp_offload)
    out_grad = s.vocab * s.hidden * w.compute_bytes
    gathered = root * w.compute_bytes + out_grad
    load = w.gpus_per_node * 2 * 4 * -(-s.largest_layer_params // w.world_size)
    if offload:
        # GPU: the root, and the decoder layer in flight: gathered in 16-bit, its next one prefetched, its unsharded
        # fp32 gradient (8 bytes per layer parameter). llama-1b with checkpointing measured 1.81 / 3.01 GiB at
        # micro-batch 4 / 8 under Liger and 4.05 under torch (estimates 1.78 / 2.98 / 4.19).
        # CPU: the sharded states, x1.15 as measured on llama-1b (20.9 GiB RSS, 2 GiB of it the process itself).
        return ModelStates(gpu=gathered + 8 * s.decoder_layer_params, cpu=load + int(sharded * w.gpus_per_node * 1.15),
                           fixed_overhead=0, after_loss=out_grad + 8 * s.decoder_layer_params)
    # the sharded gradients (a master's bytes per parameter, over the world) are freed after each step
    return ModelStates(gpu=sharded + gathered, cpu=load, fixed_overhead=0, after_loss=out_grad,
                       gradients=int(s.params * grad / w.world_size))


_HALF = ("bf16-mixed", "16-mixed")
_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}  # dtype names -> torch's


class FSDP2(Strategy):
    def __init__(self, offload: bool = False, reshard_after_forward: bool = True) -> None:
        self.offload, self.reshard_after_forward = offload, reshard_after_forward
        self._clip_into: Optional[torch.optim.Optimizer] = None  # clip-in-adamw: the AdamW the clip factor goes to
        self._grads: Optional[direct_grads.Grads] = None  # direct-grads: the 16-bit gradients FSDP2 was not given

    def lightning_strategy(self, ctx: RunContext) -> ModelParallelStrategy:
        from lightning.pytorch.strategies import ModelParallelStrategy

        from shardlab.strategies.fsdp_lightning import _OffloadingModelParallel

        cls = _OffloadingModelParallel if self.offload else ModelParallelStrategy
        return cls(data_parallel_size=ctx.world_size, tensor_parallel_size=1, save_distributed_checkpoint=True)

    def build_model(self, source: ModelSource, module, ctx: RunContext) -> torch.nn.Module:
        # Built on the meta device and sharded before any weight exists; each rank then reads only its own
        # rows of each tensor: at most one copy of the weights per node, never the whole model in one rank.
        import torch
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

        model = source.build_empty(meta=True)
        if ctx.float8:  # before sharding: the converted weights are then all-gathered in float8, not bf16
            from shardlab.recipes import float8
            float8.convert(model, fsdp_all_gather=True)
        mesh = module.device_mesh["data_parallel"]
        kwargs: dict[str, Any] = {"mesh": mesh, "reshard_after_forward": self.reshard_after_forward}
        plan = self.precision_plan(ctx)
        if ctx.precision in _HALF or plan.grad_reduce != plan.master:
            # mixed: fp32 sharded master, parameters gathered in 16-bit; gradients reduced as the plan says
            kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=getattr(torch, _DTYPES[plan.compute]),
                                                       reduce_dtype=getattr(torch, _DTYPES[plan.grad_reduce]))
        if self.offload:
            kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=ctx.accelerator == "gpu")
        # Shard each decoder layer, then the root (embeddings, final norm, lm_head), as torchtitan does.
        for layer in model.model.layers:
            fully_shard(layer, **kwargs)
        fully_shard(model, **kwargs)
        on_gpu = mesh.device_type == "cuda" and not self.offload  # offload keeps the shards in CPU memory
        load_shards(model, source, torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu"))
        if "direct-cast" in ctx.experiments and mesh.size() == 1:  # more ranks: FSDP2's own all-gather path
            direct_cast.install(model)
        if "direct-grads" in ctx.experiments and mesh.size() == 1:
            self._grads = direct_grads.Grads()
            direct_grads.install(model, self._grads)
        return model

    def experiment_refusal(self, name: str, precision: str) -> str:
        if name == "direct-grads" and precision.endswith("-true") and precision != "32-true":
            return (f"under {precision} the weights are 16-bit too, and direct-grads' AdamW steps fp32 weights; "
                    f"drop it (--experiments direct-cast,clip-in-adamw) or train in bf16-mixed")
        return direct_cast.refusal() if name in ("direct-cast", "direct-grads") else ""

    def optimizer(self, params, spec, ctx: RunContext) -> torch.optim.Optimizer:
        if self._grads is not None:  # its own AdamW, which clips as clip-in-adamw does
            optimizer = direct_grads.adamw(params, self._grads, lr=spec.lr, betas=spec.betas, eps=spec.eps,
                                           weight_decay=spec.weight_decay)
        else:
            optimizer = super().optimizer(params, spec, ctx)
        self._clip_into = optimizer if "clip-in-adamw" in ctx.experiments or self._grads is not None else None
        return optimizer

    def fused_adamw(self, ctx: RunContext) -> bool:
        return "clip-in-adamw" in ctx.experiments or super().fused_adamw(ctx)

    def clip_gradients(self, model: torch.nn.Module, max_norm: float) -> None:
        if self._grads is not None:
            return direct_grads.clip(model, max_norm, self._grads, self._clip_into)
        if self._clip_into is None or not switches.on("clip-in-adamw"):  # off: torch's clip, then the same AdamW
            return super().clip_gradients(model, max_norm)
        clip_in_adamw.clip(model, max_norm, self._clip_into)

    def after_optimizer_step(self, model: torch.nn.Module, ctx: RunContext) -> None:
        if self._clip_into is not None:
            clip_in_adamw.clear(self._clip_into)
        if ctx.float8:  # the next all-gather's float8 scales, from the new weights: one all-reduce, not one per weight
            from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp

            precompute_float8_dynamic_scale_for_fsdp(model)

    def precision_plan(self, ctx: RunContext) -> PrecisionPlan:
        # torch's MixedPrecisionPolicy reduces in param_dtype unless reduce_dtype is given.
        compute, storage = dtype_name(ctx.precision, "compute"), dtype_name(ctx.precision, "storage")
        reduce = compute if ctx.grad_reduce_dtype == "auto" else ctx.grad_reduce_dtype
        return PrecisionPlan(compute=compute, master=storage, grad_reduce=reduce, optimizer_states=storage)

    def external_config(self, fmt: str, ctx: RunContext, spec) -> dict[str, Any]:
        if fmt != "accelerate":
            return super().external_config(fmt, ctx, spec)
        return {**accelerate_base(ctx, "FSDP"), "fsdp_config": {
            "fsdp_version": 2,
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_transformer_layer_cls_to_wrap": "LlamaDecoderLayer",
            "fsdp_reshard_after_forward": self.reshard_after_forward,
            "fsdp_offload_params": self.offload,
            "fsdp_state_dict_type": "FULL_STATE_DICT",
            "fsdp_cpu_ram_efficient_loading": False,
            "fsdp_activation_checkpointing": ctx.activation_checkpointing,
        }}

    def model_state_bytes(self, shape, work):
        return fsdp_states(shape, work, offload=self.offload, direct_grads="direct-grads" in self.levers(work))

    def full_state_dict(self, model: torch.nn.Module) -> Optional[dict[str, torch.Tensor]]:
        import torch
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        return {k: v.detach().to(torch.float32) for k, v in state.items()} if is_rank_zero() else None

    # Portable checkpoints: parameters and Adam's moments are DTensors sharded on dim 0 alike.
    def portable_state(self, model, optimizer):
        import torch

        for name, p in model.named_parameters():
            state = optimizer.state[p]
            full = {k: _full_tensor(t) for k, t in (("master", p), ("exp_avg", state["exp_avg"]),
                                                    ("exp_avg_sq", state["exp_avg_sq"]))}
            yield name, ({k: v.to(torch.float32) for k, v in full.items()} if is_rank_zero() else None)

    def portable_step(self, optimizer) -> int:
        return adam_step(optimizer)

    def load_portable(self, model, optimizer, read, step) -> None:
        import torch

        ensure_adam_state(optimizer, step)  # the moments: DTensors sharded as their parameter (zeros_like)
        with torch.no_grad():
            for name, p in model.named_parameters():
                state = optimizer.state[p]
                for kind, t in (("master", p), ("exp_avg", state["exp_avg"]), ("exp_avg_sq", state["exp_avg_sq"])):
                    local = t.to_local()
                    if local.numel():
                        start = _first_row(t)
                        local.copy_(read(kind, name, rows=(start, start + local.shape[0])))


def _first_row(t) -> int:
    """The first row of dim 0 this rank holds of a DTensor sharded by fully_shard (torch.chunk's split)."""
    chunk = -(-t.shape[0] // t.device_mesh.size())
    return t.device_mesh.get_local_rank() * chunk


def _full_tensor(t) -> torch.Tensor:
    """Collective: the whole DTensor on CPU. A CPU-offloaded shard under NCCL is gathered through the GPU."""
    from torch.distributed.tensor import DTensor

    if t.device.type == "cpu" and t.device_mesh.device_type == "cuda":
        t = DTensor.from_local(t.to_local().cuda(), t.device_mesh, t.placements, shape=t.shape, stride=t.stride())
    return t.full_tensor().detach().cpu()


def load_shards(model: torch.nn.Module, source: ModelSource, device: torch.device) -> None:
    """Materialise a meta-device model sharded by fully_shard and fill each rank's rows from the folder.

    FSDP2 shards every parameter on dim 0 in torch.chunk's way: rank r holds rows [r*c, r*c + local) with
    c = ceil(rows / world). Buffers (rotary frequencies) were built for real and survive to_empty.
    """
    import torch

    buffers = {name: b.clone() for name, b in model.named_buffers()}
    model.to_empty(device=device)
    with torch.no_grad():
        for name, b in buffers.items():
            model.get_buffer(name).copy_(b)
        for name, param in model.named_parameters():
            local = param.to_local()
            if local.numel() == 0:  # more ranks than rows: this rank holds nothing of it
                continue
            start = _first_row(param)
            local.copy_(source.read(name, rows=(start, start + local.shape[0])))


# fsdp's levers (--experiments); see strategies/fsdp_direct_cast.py, fsdp_clip_in_adamw.py and fsdp_direct_grads.py
FSDP_EXPERIMENTS = {
    "direct-cast": "on one rank (one GPU), each layer's fp32 weights cast into its 16-bit ones by one foreach kernel, "
                   "and its gradients reduced in the buffer they were gathered into (torch's one-rank path copies each "
                   "weight twice and the gradient buffer once more); same values; more ranks keep torch's own path",
    "clip-in-adamw": "the gradient clip folded into the fused AdamW's step (its kernel divides by the clip factor while "
                     "it steps; no separate pass over the gradients), as zero3's fused-step clips; the clip rounds once "
                     "differently where it clips",
    "direct-grads": "on one rank (one GPU), the 16-bit gradients go straight to an AdamW that upcasts them as it "
                    "reads them (no copy into FSDP2's reduce buffer, no fp32 cast, no write-back); the clip as "
                    "clip-in-adamw's; same values; more ranks keep torch's own path",
}
_FSDP_CAPS = dict(portable_checkpoint=True, float8=True, shards_optimizer=True, shards_gradients=True, shards_parameters=True,
                  precisions=("32-true", "bf16-mixed", "bf16-true"))
PRESETS = [
    Preset(
        name="fsdp", strategy_cls=FSDP2, family="fsdp",
        description="PyTorch FSDP2 (fully_shard per decoder layer): parameters, gradients, optimizer sharded",
        # --compile: +11% tokens/s on one H200 (llama-1b; results/2026-12-02-gpu-strategies-h200.md). --fused-adds
        # (with Liger's kernels, compile off): +1.6% / +2.6% on llama-1b, +0.6% / +1.0% on the 3B shape, the peak the
        # same to the byte (one H100, results/2026-12-06i-fused-adds.md). direct-grads: +4.0-5.1% on llama-1b, +5.1-8.0%
        # on the 3B shape, the peak the same or lower (one H200 and one H100, results/2026-12-06j-direct-grads.md)
        capabilities=Capabilities(compile_by_default=True, fused_adds_by_default=True, selector_role="small",
                                  experiments=FSDP_EXPERIMENTS,
                                  default_experiments=("direct-cast", "clip-in-adamw", "direct-grads"),
                                  switchable=("direct-cast", "clip-in-adamw"), **_FSDP_CAPS),
    ),
    Preset(
        name="fsdp_offload", strategy_cls=FSDP2, family="fsdp", kwargs={"offload": True},
        description="PyTorch FSDP2 with parameters, gradients and optimizer step on CPU",
        capabilities=Capabilities(offload="all", **_FSDP_CAPS),
    ),
]
