"""DDP: every rank holds the whole model; gradients are all-reduced."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from shardlab.core import memory
from shardlab.core.memory import ModelStates, Shape, Workload
from shardlab.core.external import accelerate_base
from shardlab.core.errors import UserError
from shardlab.core.strategy import Preset, Capabilities, PrecisionPlan, RunContext, Strategy, dtype_name
from shardlab.strategies._common import adam_step, ensure_adam_state, is_rank_zero, process_group_backend, to_cpu_fp32

if TYPE_CHECKING:  # torch and Lightning load when a run builds the strategy, not when the registry lists it
    import torch
    from lightning.pytorch.strategies import DDPStrategy


# Model states per rank. Byte counts per parameter after the ZeRO paper (Rajbhandari et al. 2020, sec. 3:
# mixed-precision Adam holds 2 + 2 + 12 = 16 bytes per parameter).
def ddp_states(s: Shape, w: Workload) -> ModelStates:
    """Full replica: master params + grads + Adam (2 states) + DDP's gradient buckets (Lightning keeps
    gradient_as_bucket_view off, so they are a copy): 20 bytes per parameter in fp32. Under *-mixed, autocast
    caches a 16-bit copy of each weight through forward (2n more): on one H200 (llama-1b, Liger) the peak without
    checkpointing sits at the end of forward with it (36.44 GiB, estimate 37.5), while with checkpointing the
    peak comes in backward without it (22.58 / 24.24 GiB at micro-batch 4 / 8; estimates 22.9 / 24.9), no fixed
    overhead on top. CPU: each rank loads the fp32 model before moving it to its GPU (4n).
    --float8: a Float8Linear casts its fp32 weight to float8 at each call and keeps no 16-bit copy, so autocast
    caches only the rest (embeddings, lm_head); not measured on a GPU yet."""
    n = s.params
    m = memory.master_bytes(w)
    converted = s.layers * (s.decoder_layer_params - 2 * s.hidden) if w.float8 else 0  # a layer less its two norms
    cache = 2 * (n - converted) if w.precision.endswith("-mixed") and not w.activation_checkpointing else 0
    return ModelStates(gpu=n * (m + m + 2 * m + m), cpu=4 * n * w.gpus_per_node, forward_only=cache,
                       fp32_residual=w.precision.endswith("-mixed"), fixed_overhead=0, gradients=n * m)


class DDP(Strategy):
    def lightning_strategy(self, ctx: RunContext) -> DDPStrategy:
        from lightning.pytorch.strategies import DDPStrategy

        return DDPStrategy(process_group_backend=process_group_backend(ctx))

    def check(self, ctx: RunContext) -> None:
        super().check(ctx)
        natural = dtype_name(ctx.precision, "storage")
        if ctx.grad_reduce_dtype not in ("auto", natural):
            raise UserError(f"--grad-reduce-dtype {ctx.grad_reduce_dtype}: ddp reduces gradients in the parameters' "
                            f"dtype ({natural} under {ctx.precision}); use auto")

    def precision_plan(self, ctx: RunContext) -> PrecisionPlan:
        storage = dtype_name(ctx.precision, "storage")  # DDP all-reduces the gradients in the parameters' dtype
        return PrecisionPlan(compute=dtype_name(ctx.precision, "compute"), master=storage,
                             grad_reduce=storage, optimizer_states=storage)

    def external_config(self, fmt: str, ctx: RunContext, spec) -> dict:
        if fmt != "accelerate":
            return super().external_config(fmt, ctx, spec)
        return accelerate_base(ctx, "MULTI_GPU" if ctx.accelerator == "gpu" else "MULTI_CPU")

    def model_state_bytes(self, shape, work):
        return ddp_states(shape, work)

    def full_state_dict(self, model: torch.nn.Module) -> Optional[dict[str, torch.Tensor]]:
        return to_cpu_fp32(model.state_dict()) if is_rank_zero() else None

    # Portable checkpoints: every rank holds the whole model and the whole Adam state (torch's AdamW).
    def portable_state(self, model, optimizer):
        for name, p in model.named_parameters():
            if not is_rank_zero():
                yield name, None
                continue
            state = optimizer.state[p]
            yield name, to_cpu_fp32({"master": p, "exp_avg": state["exp_avg"], "exp_avg_sq": state["exp_avg_sq"]})

    def portable_step(self, optimizer) -> int:
        return adam_step(optimizer)

    def load_portable(self, model, optimizer, read, step) -> None:
        import torch

        ensure_adam_state(optimizer, step)
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(read("master", name))
                for kind in ("exp_avg", "exp_avg_sq"):
                    optimizer.state[p][kind].copy_(read(kind, name))


PRESETS = [Preset(
    name="ddp", strategy_cls=DDP, family="ddp",
    description="PyTorch DDP: full replica per rank, gradients all-reduced",
    # --compile: +9% tokens/s on one H200 (llama-1b, with --chunked-loss; results/2026-12-02-gpu-strategies-h200.md)
    capabilities=Capabilities(compile_by_default=True, portable_checkpoint=True, float8=True),
)]
