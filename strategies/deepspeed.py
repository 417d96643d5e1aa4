"""DeepSpeed ZeRO-2 and ZeRO-3, with and without CPU offload, over Lightning's DeepSpeedStrategy."""
from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, Iterable, Optional

from shardlab.core.precision import half
from shardlab.core.external import accelerate_base
from shardlab.core.strategy import Preset, Capabilities, ModelSource, OptimizerSpec, PrecisionPlan, RunContext, Strategy, dtype_name
from shardlab.strategies import deepspeed_console  # silences DeepSpeed's messages a user cannot act on, on import
from shardlab.strategies import deepspeed_experiments as experiments
from shardlab.strategies.deepspeed_memory import DEEPSPEED_SUB_GROUP_SIZE, zero2_states, zero3_states
from shardlab.strategies.deepspeed_offload import OFFLOAD_RATIO_SUB_GROUP_SIZE
from shardlab.strategies._common import adam_step, is_rank_zero, process_group_backend

if TYPE_CHECKING:  # torch, Lightning and DeepSpeed load when a run builds the strategy, not when the registry lists it
    import torch
    from lightning.pytorch.strategies import DeepSpeedStrategy


# The recipe's configure_gradient_clipping defers to the Strategy, which for DeepSpeed does nothing:
# DeepSpeed clips from its config. Lightning's warning about that override does not apply.
warnings.filterwarnings("ignore", message="Since DeepSpeed handles gradient clipping internally")



# ZeRO-3 without offload runs with the zero_optimization settings of Lightning's DeepSpeedStrategy
# (the raw anchor): overlap_comm measured +7% tokens/s on one H200 (34,710-35,080 -> 37,547, llama-1b,
# results/2026-12-02-gpu-strategies-h200.md); the bucket and sub-group sizes are the anchor's, not
# measured apart; zero3's sub-groups lever (a default) sets sub_group_size 2e8 over it (deepspeed_experiments.py). Other
# presets keep DeepSpeed's defaults (ZeRO-2 is at parity with its anchor; zero3_offload's overlap-comm lever, one of its
# defaults, turns overlap_comm on: deepspeed_experiments.py).
ZERO3_TUNING: dict[str, Any] = {"overlap_comm": True, "reduce_bucket_size": int(2e8), "allgather_bucket_size": int(2e8),
                                "sub_group_size": int(1e12)}


def ds_scheduler(spec: OptimizerSpec) -> dict[str, Any]:
    """shardlab's LR schedule as DeepSpeed's scheduler (deepspeed/runtime/lr_schedules.py), linear warm-up."""
    warm = {"warmup_num_steps": spec.warmup_steps, "warmup_type": "linear"}
    if spec.schedule == "constant":
        return {"type": "WarmupLR", "params": {**warm, "warmup_min_lr": 0.0, "warmup_max_lr": spec.lr}}
    if spec.schedule == "cosine":
        return {"type": "WarmupCosineLR", "params": {**warm, "total_num_steps": spec.total_steps,
                                                     "warmup_min_ratio": 0.0, "cos_min_ratio": spec.min_lr_ratio}}
    if spec.min_lr_ratio != 0:  # DeepSpeed's WarmupDecayLR decays to 0
        from shardlab.core.errors import UserError

        raise UserError(f"--min-lr-ratio {spec.min_lr_ratio}: DeepSpeed's linear decay (WarmupDecayLR) ends at 0; "
                        f"use --min-lr-ratio 0 with --lr-schedule linear, or --lr-schedule cosine")
    return {"type": "WarmupDecayLR", "params": {**warm, "total_num_steps": spec.total_steps,
                                                "warmup_min_lr": 0.0, "warmup_max_lr": spec.lr}}


class ZeRO(Strategy):
    loss_scale_knobs = ("initial_power", "window", "hysteresis", "min")

    def __init__(self, stage: int, offload: str = "none", tuning: Optional[dict[str, Any]] = None) -> None:
        self.stage, self.offload, self.tuning = stage, offload, tuning or {}

    @classmethod
    def read_native_config(cls, path):
        from shardlab.strategies import deepspeed_config as ds_config

        config = ds_config.load(path)
        fields, notes = ds_config.intent(config, path)
        return config, fields, notes

    def use_native_config(self, config, name, ctx, spec, hidden_size):
        from shardlab.strategies import deepspeed_config as ds_config

        run = dict(micro_batch_size=ctx.micro_batch_size, grad_accum=ctx.grad_accum, world_size=ctx.world_size,
                   grad_clip=ctx.grad_clip, precision=ctx.precision, stage=self.stage, offload=self.offload,
                   offload_ratio=ctx.offload_ratio,
                   lr=spec.lr, weight_decay=spec.weight_decay, hidden_size=hidden_size)
        filled, _, warnings = ds_config.reconcile(config, run, name)
        for section in ("optimizer", "scheduler"):  # their values are the run's (recipes/resolve.py); shardlab builds both
            filled.pop(section, None)
        filled.pop("gradient_accumulation_steps", None)  # Lightning sets it from --grad-accum (checked equal)
        return filled, warnings

    def ds_config(self, ctx: RunContext) -> dict[str, Any]:
        """The DeepSpeed JSON config this preset runs with (Lightning adds the precision section)."""
        pin = ctx.accelerator == "gpu"
        zero: dict[str, Any] = {"stage": self.stage, "overlap_comm": False, "contiguous_gradients": True, **self.tuning}
        if self.offload in ("optimizer", "all"):
            zero["offload_optimizer"] = {"device": "cpu", "pin_memory": pin}
        # only for a ratio: the default run's config stays as it was (Strategy.check refuses it to presets without it)
        if ctx.offload_ratio != 1 and "offload_optimizer" in zero:
            zero["offload_optimizer"]["ratio"] = ctx.offload_ratio
            zero["sub_group_size"] = OFFLOAD_RATIO_SUB_GROUP_SIZE  # enough sub-groups for the ratio to mean something
        if self.offload == "all":
            zero["offload_param"] = {"device": "cpu", "pin_memory": pin}
        if self.stage == 3:
            zero["stage3_gather_16bit_weights_on_model_save"] = True
        extra: dict[str, Any] = {"communication_data_type": ctx.grad_reduce_dtype} if ctx.grad_reduce_dtype != "auto" else {}
        experiments.configure(ctx.experiments, zero, extra)
        if ctx.precision == "16-mixed":  # dynamic loss scaling with the run's knobs (Lightning keeps a given fp16 section)
            power, window, hysteresis, minimum = ctx.loss_scale
            extra["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": power,
                             "loss_scale_window": window, "hysteresis": hysteresis, "min_loss_scale": minimum}
        return {
            **extra,
            "zero_optimization": zero,
            "zero_allow_untested_optimizer": True,
            "train_micro_batch_size_per_gpu": ctx.micro_batch_size,
            # DeepSpeed defaults clipping to 1.0 where Lightning defaults to 0: always say it explicitly.
            "gradient_clipping": ctx.grad_clip,
            "steps_per_print": 10**9,
            "wall_clock_breakdown": False,
        }

    def precision_plan(self, ctx: RunContext) -> PrecisionPlan:
        # DeepSpeed keeps fp32 master weights and Adam states for every 16-bit mode (bf16-true included)
        # and reduces gradients in their own 16-bit dtype unless communication_data_type says otherwise.
        compute = dtype_name(ctx.precision, "compute")
        reduce = compute if ctx.grad_reduce_dtype == "auto" else ctx.grad_reduce_dtype
        return PrecisionPlan(compute=compute, master="fp32", grad_reduce=reduce, optimizer_states="fp32")

    def external_config(self, fmt: str, ctx: RunContext, spec: OptimizerSpec) -> dict[str, Any]:
        if fmt == "deepspeed":  # a complete ds_config.json: what Lightning adds (precision, accumulation) included
            cfg = self.ds_config(ctx)
            cfg["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] = self.stage == 3
            cfg["gradient_accumulation_steps"] = ctx.grad_accum
            cfg["train_batch_size"] = ctx.micro_batch_size * ctx.grad_accum * ctx.world_size
            cfg["optimizer"] = {"type": "AdamW", "params": {"lr": spec.lr, "betas": list(spec.betas), "eps": spec.eps,
                                                          "weight_decay": spec.weight_decay}}
            cfg["scheduler"] = ds_scheduler(spec)
            if half(ctx.precision):
                cfg[half(ctx.precision)] = {"enabled": True}
            return cfg
        if fmt == "accelerate":
            return {**accelerate_base(ctx, "DEEPSPEED"), "deepspeed_config": {
                "zero_stage": self.stage,
                "offload_optimizer_device": "cpu" if self.offload != "none" else "none",
                "offload_param_device": "cpu" if self.offload == "all" else "none",
                "gradient_accumulation_steps": ctx.grad_accum,
                "gradient_clipping": ctx.grad_clip,
                "zero3_init_flag": self.stage == 3,
                # without it ZeRO-3 saves partitioned shards that from_pretrained cannot load
                "zero3_save_16bit_model": self.stage == 3,
            }}
        return super().external_config(fmt, ctx, spec)

    def experiment_refusal(self, name: str, precision: str) -> str:
        return experiments.refusal(name, precision)

    def check(self, ctx: RunContext) -> None:
        super().check(ctx)
        experiments.check_together(ctx.experiments)
        if "overlap-step" in ctx.experiments and (ctx.world_size > 1 or ctx.compile):
            from shardlab.core.errors import UserError

            why = (f"runs on one GPU only (one rank's fetch reads no partition; {ctx.world_size} ranks would gather "
                   f"before the wait); use --devices 1" if ctx.world_size > 1 else
                   "its wait is in the eager parameter read that torch.compile's graphs skip; drop --compile")
            raise UserError(f"--experiments overlap-step: {why}, or drop the experiment")

    def warnings(self, ctx: RunContext) -> list[str]:
        # On a GPU the ratio is measured (one H200, llama-1b: losses within bf16 noise of ratio 1, the peak within 0.1%
        # of the estimate; results/2026-12-05b-offload-h200.md); on CPU processes it does nothing
        ratio = [] if ctx.offload_ratio == 1 or ctx.accelerator != "cpu" else [
            f"--offload-ratio {ctx.offload_ratio:g}: on CPU processes DeepSpeed keeps every part of the optimizer on the "
            f"CPU: the same run as ratio 1"]
        return ratio

    def fused_adamw(self, ctx: RunContext) -> bool:
        # fused-step hands the clip to the fused kernel (CPU processes too, so CI runs that path); DeepSpeed scales
        # fp16 losses itself, so Lightning's GradScaler never needs the unfused one here
        return "fused-step" in ctx.experiments or super().fused_adamw(ctx)

    def model_state_bytes(self, shape, work):
        if self.stage == 2:
            return zero2_states(shape.params, work, offload=self.offload != "none")
        levers = self.levers(work)
        groups = experiments.sub_group_size(levers, self.tuning.get("sub_group_size", DEEPSPEED_SUB_GROUP_SIZE))
        return zero3_states(shape, work, offload_optimizer=self.offload != "none", offload_params=self.offload == "all",
                            fused_step="fused-step" in levers, sub_group_size=groups,
                            direct_grads="direct-grads" in levers, gpu_accum="gpu-accum" in levers,
                            gpu_grads="gpu-grads" in levers)

    def _run_config(self, ctx: RunContext) -> dict[str, Any]:
        """The DeepSpeed config the run hands Lightning: the preset's, with the user's file over it."""
        config = self.ds_config(ctx)
        if ctx.native_config is not None:  # the user's file wins where it says something (checked in use_native_config)
            zero = {**config["zero_optimization"], **ctx.native_config.get("zero_optimization", {})}
            config = {**config, **ctx.native_config, "zero_optimization": zero}
        return config

    def checkpoint_layout(self, ctx: RunContext) -> dict[str, Any]:
        # ZeRO-3 saves its fp32 master and Adam moments per sub-group (and, with a ratio, on the GPU or the CPU by
        # sub-group): another sub_group_size or ratio cannot load them ("a parameter group that doesn't match")
        if self.stage != 3:
            return {}
        zero = self._run_config(ctx)["zero_optimization"]
        layout = {"sub_group_size": int(zero.get("sub_group_size", DEEPSPEED_SUB_GROUP_SIZE))}
        if "offload_optimizer" in zero:
            layout["offload_ratio"] = float(zero["offload_optimizer"].get("ratio", 1.0))
        return layout

    def lightning_strategy(self, ctx: RunContext) -> DeepSpeedStrategy:
        config = self._run_config(ctx)
        from shardlab.strategies.deepspeed_lightning import _LightningDeepSpeed

        return _LightningDeepSpeed(config=config, process_group_backend=process_group_backend(ctx),
                                   experiments=ctx.experiments)

    def trainer_kwargs(self, ctx: RunContext) -> dict[str, Any]:
        return {"precision": ctx.precision}  # clipping lives in the DeepSpeed config

    def build_model(self, source: ModelSource, module, ctx: RunContext) -> torch.nn.Module:
        if self.stage < 3:
            return source.load_full()
        # Lightning runs configure_model inside deepspeed.zero.Init: parameters are partitioned as
        # each layer is built, so the full model never exists on one rank. zero.Init draws its own
        # random init; overwrite every parameter from the shared initial weights, one at a time.
        from deepspeed.utils import set_z3_leaf_modules

        model = source.build_empty()
        load_into_partitioned(model, source)
        # One ZeRO-3 fetch and release per decoder layer (a DeepSpeed "leaf module") instead of one per
        # linear and norm: +14% tokens/s on one H200 (55,605 and 56,340 -> 63,796 and 63,586, llama-1b;
        # results/2026-12-03-ratios-zero3-leaf-h200.md). model_state_bytes counts a whole layer as the unit fetched.
        set_z3_leaf_modules(model, [type(model.model.layers[0])])
        return model

    def optimizer(self, params: Iterable[torch.nn.Parameter], spec: OptimizerSpec, ctx: RunContext) -> torch.optim.Optimizer:
        if self.offload == "none":
            return super().optimizer(params, spec, ctx)
        from deepspeed.ops.adam import DeepSpeedCPUAdam  # ZeRO-Offload refuses torch optimizers

        deepspeed_console.announce_cpu_adam_build(is_rank_zero())  # the constructor compiles it on first use
        return DeepSpeedCPUAdam(params, lr=spec.lr, betas=spec.betas, eps=spec.eps,
                                weight_decay=spec.weight_decay, adamw_mode=True)

    def why_not_here(self) -> Optional[str]:
        if self.offload == "none":
            return None
        try:  # ZeRO-Offload steps with DeepSpeedCPUAdam, compiled at first use
            from deepspeed.ops.op_builder import CPUAdamBuilder

            return None if CPUAdamBuilder().is_compatible(verbose=False) else "DeepSpeedCPUAdam (cpu_adam) cannot build here"
        except Exception as e:
            return f"DeepSpeedCPUAdam unavailable: {type(e).__name__}"

    def clip_gradients(self, model: torch.nn.Module, max_norm: float) -> None:
        pass  # DeepSpeed clips inside engine.step, from `gradient_clipping` in its config

    def release_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        pass  # engine.step zeroes its gradients itself (DeepSpeedEngine._take_model_step), its buckets stay

    def full_state_dict(self, model: torch.nn.Module) -> Optional[dict[str, torch.Tensor]]:
        # The fp32 master copy (the optimizer's), not the 16-bit module weights: collective under ZeRO-3.
        settle_overlap()  # overlap-step's queued CPU step first
        import torch
        from deepspeed.utils import safe_get_full_fp32_param

        state: dict[str, torch.Tensor] = {}
        for name, param in model.named_parameters():
            full = safe_get_full_fp32_param(param)
            if is_rank_zero():
                state[name] = full.detach().to("cpu", torch.float32).clone()
        return state if is_rank_zero() else None

    # Portable checkpoints (recipes/portable.py) through DeepSpeed's per-parameter API: deepspeed_portable.py.
    def portable_state(self, model, optimizer):
        settle_overlap()  # overlap-step's queued CPU step first
        from shardlab.strategies import deepspeed_portable

        return deepspeed_portable.state(model, optimizer, self.stage)

    def portable_step(self, optimizer) -> int:
        settle_overlap()  # overlap-step's queued CPU step first
        return adam_step(optimizer.optimizer)

    def load_portable(self, model, optimizer, read, step) -> None:
        settle_overlap()  # overlap-step's queued CPU step first
        from shardlab.strategies import deepspeed_portable

        deepspeed_portable.load(model, optimizer, read, step, self.stage)


def settle_overlap() -> None:
    """overlap-step's queued CPU step (deepspeed_offload_overlap.py) finished, where a run installed it: before the
    weights or the optimizer's state are read in bulk."""
    import sys

    overlap = sys.modules.get("shardlab.strategies.deepspeed_offload_overlap")
    if overlap is not None:
        overlap.settle_all()


def load_into_partitioned(model: torch.nn.Module, source: ModelSource) -> None:
    """Copy the folder's weights into ZeRO-3 partitioned parameters: rank 0 reads one tensor at a time,
    DeepSpeed scatters it. A tied embedding is one parameter here (named_parameters lists it once)."""
    import deepspeed
    import torch.distributed as dist

    rank0 = is_rank_zero()
    for name, param in model.named_parameters():
        with deepspeed.zero.GatheredParameters([param], modifier_rank=0):
            if rank0:
                param.data.copy_(source.read(name))
    if dist.is_initialized():
        dist.barrier()


_ZERO_SHARDS = {2: dict(shards_optimizer=True, shards_gradients=True),
                3: dict(shards_optimizer=True, shards_gradients=True, shards_parameters=True)}

PRESETS = [
    Preset(
        name=name, strategy_cls=ZeRO, family=f"zero{stage}", description=desc,
        kwargs={"stage": stage, "offload": offload, "tuning": ZERO3_TUNING if name == "zero3" else None},
        # torch.compile of the decoder layers: ZeRO-2 measured +11.6% on one H200 (47,128 -> 52,581 tokens/s, llama-1b,
        # results/2026-12-02-offload-and-ratios-h200.md); ZeRO-3 -16.5% (its parameter fetch hooks break the graphs).
        # --float8: ZeRO-2 and zero3 (2 CPU ranks, tiny Llama 3 shape: losses within 2e-3 of fsdp's float8 run,
        # tests/recipes/test_float8.py). zero3's export check once gave NaN logits: the reload had garbage RoPE
        # frequencies, from torch's device-context cache filled inside zero.Init (fixed in _LightningDeepSpeed's
        # model_sharded_context). zero2_offload too (CPU: within 3.4e-4 of fsdp:float8); zero3's offload presets
        # have not run with float8, so they refuse it.
        # --offload-ratio: zero3_offload only. With parameter offload too (zero3_offload_all) the GPU's sub-groups
        # would step fp32 masters whose 16-bit partitions live on the CPU; DeepSpeed's code does not refuse it, but
        # no run here has exercised it (on CPU processes every sub-group is on the CPU anyway), so it stays refused.
        # --fused-adds: zero3 +1.1% / +1.7% on llama-1b, the peak the same to the byte (one H100,
        # results/2026-12-06i-fused-adds.md); the other presets have not measured it.
        capabilities=Capabilities(offload=offload, compile_by_default=name == "zero2", native_config="deepspeed",
                                  fused_adds_by_default=name == "zero3",
                                  portable_checkpoint=True, offload_ratio=name == "zero3_offload",
                                  float8=name in ("zero2", "zero2_offload", "zero3"),
                                  selector_role=role, experiments=experiments.OFFERED.get(name, ({}, ()))[0],
                                  default_experiments=experiments.OFFERED.get(name, ({}, ()))[1],
                                  switchable=experiments.SWITCHABLE.get(name, ()),
                                  **_ZERO_SHARDS[stage]),
    )
    for name, stage, offload, role, desc in [
        ("zero2", 2, "none", "large_single_node", "DeepSpeed ZeRO-2: optimizer states and gradients sharded"),
        ("zero2_offload", 2, "optimizer", None, "DeepSpeed ZeRO-2 with the optimizer (states and step) on CPU"),
        ("zero3", 3, "none", "large", "DeepSpeed ZeRO-3: parameters, gradients and optimizer states sharded"),
        ("zero3_offload", 3, "optimizer", "offload_optimizer", "DeepSpeed ZeRO-3 with the optimizer (states and step) on CPU"),
        ("zero3_offload_all", 3, "all", "offload_all", "DeepSpeed ZeRO-3 with optimizer and parameters on CPU"),
    ]
]
