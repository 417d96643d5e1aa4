"""The Strategy interface: what every backend (built-in or plug-in) provides to the recipe.

The recipe (``shardlab.recipes``) talks to this interface only. An adapter turns its typed options
into a Lightning strategy and answers the questions the recipe asks; it never chooses a backend.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Literal, Optional

from pydantic import BaseModel, ConfigDict

from shardlab.core.precision import dtype_name  # noqa: F401  (adapters and plug-ins import it from here)

if TYPE_CHECKING:  # torch and Lightning load when a run needs them: `recipe plan` and `strategies` never import them
    import lightning.pytorch as pl
    import torch

    from shardlab.core.memory import Estimate, ModelStates, Shape, Workload

Offload = Literal["none", "optimizer", "all"]


class Capabilities(BaseModel):
    """What a strategy can do; the selector and `recipe strategies` read this, never the class."""

    model_config = ConfigDict(frozen=True, use_attribute_docstrings=True)

    cpu: bool = True
    """Runs on CPU processes over gloo (what CI uses)."""
    gpu: bool = True
    """Runs on CUDA GPUs over NCCL."""
    multi_node: bool = True
    """Can span several nodes."""
    offload: Offload = "none"
    """What this preset keeps in CPU memory: nothing, the optimizer state, or optimizer and parameters."""
    shards_optimizer: bool = False
    """Optimizer states are split across ranks (ZeRO-1 and up)."""
    shards_gradients: bool = False
    """Gradients are split across ranks (ZeRO-2 and up)."""
    shards_parameters: bool = False
    """Parameters are split across ranks (ZeRO-3, FSDP)."""
    export_16bit: bool = True
    """Can write a consolidated Hugging Face folder from a 16-bit run."""
    precisions: tuple[str, ...] = ("32-true", "bf16-mixed", "bf16-true", "16-mixed")
    """Lightning precision strings this preset accepts."""
    compile: bool = True
    """torch.compile of the decoder layers works under this backend."""
    float8: bool = False
    """Decoder layers' linears in float8 (torchao's Float8Linear, `--float8`) train correctly under this backend
    (tested against bf16; recipes/module.py converts them after build_model unless the adapter did it before)."""
    offload_ratio: bool = False
    """Keeps part of the offloaded optimizer on the GPU (`--offload-ratio`, DeepSpeed ZeRO-3's offload_optimizer.ratio)."""
    experiments: dict[str, str] = {}
    """Levers this preset offers (`--experiments NAME`), each name with a one-line description: changes to speed or
    memory, not to what is trained."""
    default_experiments: tuple[str, ...] = ()
    """Those of `experiments` a run gets unless --experiments names its own (`--experiments none`: none): only levers
    measured faster on a GPU with the same losses, their memory measured too (benchmarks/gpu_memory.py)."""
    switchable: tuple[str, ...] = ()
    """Those of `experiments` that can be switched off and on between the steps of one run (core/switches.py): a
    paired A/B of their speed in one process (`SHARDLAB_AB=NAME recipe run ...`, recipes/lever_ab.py)."""
    selector_role: Optional[Literal["small", "large_single_node", "large", "offload_optimizer", "offload_all"]] = None
    """The branch of the selector's decision tree (core/selector.py) that picks this preset: small (< 10B, no
    offload), large_single_node (>= 10B on one node of < 8 GPUs), large (>= 10B otherwise), offload_optimizer,
    offload_all. None: chosen by name, or by `auto` only as the next fitting preset in memory order."""
    native_config: Optional[str] = None
    """The kind of the backend's own config file it reads (`deepspeed`: `--deepspeed-config`), or None."""
    compile_by_default: bool = False
    """Measured faster with torch.compile on a GPU: GPU runs compile unless the user says --no-compile."""
    fused_adds_by_default: bool = False
    """Measured faster with --fused-adds on a GPU (recipes/fused_adds.py): GPU runs with Liger's kernels fold the adds
    unless the user says --no-fused-adds or --compile."""
    portable_checkpoint: bool = False
    """Writes and reads the portable copy of a checkpoint (each parameter's fp32 master and Adam moments,
    recipes/portable.py): a run resumes under another strategy or world size, and `recipe export` reads it.
    True needs `portable_state`, `portable_step` and `load_portable`."""


@dataclass(frozen=True)
class RunContext:
    """What the recipe tells a strategy about the run before it builds anything."""

    accelerator: str  # "cpu" or "gpu", already resolved from "auto"
    devices: int
    num_nodes: int
    precision: str
    grad_accum: int
    grad_clip: float
    micro_batch_size: int
    grad_reduce_dtype: str = "auto"  # "auto" (the backend's own default), "fp32" or "bf16"
    activation_checkpointing: bool = False
    loss_scale: tuple[int, int, int, float] = (16, 1000, 2, 1.0)  # 16-mixed: initial power, window, hysteresis, min
    compile: bool = False  # torch.compile each decoder layer's forward
    fused_adds: bool = False  # the decoder layers' adds folded into the kernels beside them (recipes/fused_adds.py)
    chunked_loss: bool = False  # output projection + cross-entropy per chunk of tokens (recipes/loss.py)
    kernels: str = "torch"  # "torch" or "liger" (fused Triton kernels, recipes/kernels.py)
    float8: bool = False  # decoder layers' linears in float8 (torchao), recipes/float8.py
    offload_ratio: float = 1.0  # ZeRO-3 optimizer offload: share of the optimizer on the CPU (DeepSpeed offload_optimizer.ratio)
    experiments: tuple[str, ...] = ()  # --experiments: names from capabilities.experiments, each checked in `check`
    native_config: Optional[dict] = None  # the user's own backend config (--deepspeed-config), as use_native_config filled it

    @property
    def world_size(self) -> int:
        return self.devices * self.num_nodes


@dataclass(frozen=True)
class PrecisionPlan:
    """The dtypes a strategy will use under a run's precision: what `recipe compare` audits and aligns."""

    compute: str
    """Parameters as the forward/backward matmuls see them."""
    master: str
    """The weights the optimizer updates."""
    grad_reduce: str
    """Gradients as they are reduced across ranks."""
    optimizer_states: str
    """Adam's exp_avg / exp_avg_sq."""


def grad_scaler_kwargs(ctx: RunContext) -> dict[str, Any]:
    """The run's fp16 loss-scale knobs in torch.amp.GradScaler's terms (it has no hysteresis or minimum)."""
    power, window = ctx.loss_scale[:2]
    return {"init_scale": 2.0**power, "growth_interval": window}


@dataclass(frozen=True)
class OptimizerSpec:
    """AdamW hyper-parameters; every strategy builds an optimizer that follows them."""

    lr: float
    weight_decay: float = 0.0
    schedule: str = "constant"  # after warm-up: constant, cosine or linear decay
    warmup_steps: int = 0
    min_lr_ratio: float = 0.1
    total_steps: int = 1
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8


@dataclass
class ModelSource:
    """Where the initial weights live: a Hugging Face folder every strategy loads from.

    Tied embeddings (Llama 3.2): every model built here shares one matrix between `model.embed_tokens`
    and `lm_head`, and `named_parameters()` lists it once, as `model.embed_tokens.weight`.
    """

    folder: str
    load_full: Callable[[], torch.nn.Module]
    """Loads the whole model on CPU in fp32 (from_pretrained on the folder)."""
    build_empty: Callable[..., torch.nn.Module]
    """build_empty(meta=False): the architecture without loading weights, to be overwritten. meta=True puts
    the parameters on the meta device (nothing allocated; buffers such as rotary frequencies stay real)."""
    read: Callable[..., torch.Tensor] = field(repr=False, default=None)  # type: ignore[assignment]
    """read(name, rows=None): one parameter from the folder's safetensors files in fp32, by its
    `named_parameters()` name; rows=(start, stop) reads only those rows of dim 0 (a rank's shard)."""


class Strategy(ABC):
    """One backend preset. Subclasses are thin adapters over a Lightning strategy."""

    #: The registry fills these from the preset that built the instance.
    name: str = ""
    description: str = ""
    capabilities: Capabilities = Capabilities()

    #: Which fp16 loss-scale knobs the backend honours; the others must stay at their defaults.
    loss_scale_knobs: tuple[str, ...] = ("initial_power", "window")

    def check(self, ctx: RunContext) -> None:
        """Raise ``UserError`` for a combination this backend cannot run correctly (called before any process starts)."""
        from shardlab.core.errors import UserError

        if ctx.precision not in self.capabilities.precisions:
            raise UserError(
                f"--precision {ctx.precision}: strategy '{self.name}' supports "
                f"{', '.join(self.capabilities.precisions)}; pick one of those or another strategy"
            )
        if ctx.compile and not self.capabilities.compile:
            raise UserError(f"--compile: strategy '{self.name}' does not run with torch.compile; use --no-compile")
        if ctx.float8 and not self.capabilities.float8:
            from shardlab.core import registry

            cleared = ", ".join(n for n, p in registry.presets().items() if p.capabilities.float8)
            raise UserError(f"--float8: strategy '{self.name}' is not cleared for float8 linears; use one that is "
                            f"({cleared}), or drop --float8")
        if ctx.offload_ratio != 1.0 and not self.capabilities.offload_ratio:
            raise UserError(f"--offload-ratio {ctx.offload_ratio:g}: strategy '{self.name}' keeps no part of an offloaded "
                            f"optimizer on the GPU; use zero3_offload, or drop --offload-ratio")
        unknown = ", ".join(f"'{e}'" for e in ctx.experiments if e not in self.capabilities.experiments)
        if unknown:
            offered = ", ".join(self.capabilities.experiments)
            raise UserError(f"--experiments {','.join(ctx.experiments)}: strategy '{self.name}' offers no experiment "
                            f"{unknown}; it offers: " + (f"{offered} (`recipe strategies` describes them)" if offered
                                                         else "none; drop --experiments"))
        for name in ctx.experiments:
            why = self.experiment_refusal(name, ctx.precision)
            if why:
                raise UserError(f"--experiments {name}: {why}")
        defaults = RunContext.__dataclass_fields__["loss_scale"].default
        for i, knob in enumerate(("initial_power", "window", "hysteresis", "min")):
            if ctx.loss_scale[i] != defaults[i] and knob not in self.loss_scale_knobs:
                raise UserError(f"--loss-scale-{knob.replace('_', '-')} {ctx.loss_scale[i]}: strategy '{self.name}' "
                                f"scales fp16 losses with torch's GradScaler, which has no such knob; use a zero* strategy")

    @abstractmethod
    def lightning_strategy(self, ctx: RunContext) -> "pl.strategies.Strategy":
        """The Lightning strategy object the Trainer runs with."""

    def trainer_kwargs(self, ctx: RunContext) -> dict[str, Any]:
        """Extra Trainer arguments (precision, clipping) this backend needs; defaults pass them through.

        16-mixed gets torch's GradScaler with the run's initial scale and growth interval.
        """
        kwargs: dict[str, Any] = {"gradient_clip_val": ctx.grad_clip or None}
        if ctx.precision == "16-mixed":
            import torch
            from lightning.pytorch.plugins import MixedPrecision

            scaler = torch.amp.GradScaler("cuda", **grad_scaler_kwargs(ctx))
            return {**kwargs, "plugins": [MixedPrecision("16-mixed", "cuda", scaler=scaler)]}
        return {**kwargs, "precision": ctx.precision}

    def build_model(self, source: ModelSource, module: "pl.LightningModule", ctx: RunContext) -> torch.nn.Module:
        """Called inside ``configure_model``: materialise the model with the initial weights (and shard it)."""
        return source.load_full()

    def optimizer(self, params: Iterable[torch.nn.Parameter], spec: OptimizerSpec, ctx: RunContext) -> torch.optim.Optimizer:
        """The optimizer this backend steps with."""
        import torch

        return torch.optim.AdamW(params, lr=spec.lr, betas=spec.betas, eps=spec.eps,
                                 weight_decay=spec.weight_decay, fused=self.fused_adamw(ctx))

    def default_experiments(self, precision: str) -> tuple[str, ...]:
        """The levers a run in this precision gets when --experiments is not given: Capabilities.default_experiments,
        less those `experiment_refusal` refuses here."""
        return tuple(n for n in self.capabilities.default_experiments if not self.experiment_refusal(n, precision))

    def levers(self, work) -> tuple[str, ...]:
        """The levers a workload's estimate counts (model_state_bytes): its experiments as the run resolved them, else
        (a preset the selector only weighs) this preset's defaults in its precision."""
        return tuple(work.experiments) if work.experiments is not None else self.default_experiments(work.precision)

    def experiment_refusal(self, name: str, precision: str) -> str:
        """Why lever `name` cannot run in this precision with the installed libraries ('' where it can): `check`
        refuses it in those words, and the defaults leave it out. Default: every lever can run."""
        return ""

    def fused_adamw(self, ctx: RunContext) -> bool:
        """Whether `optimizer`'s AdamW is torch's fused one (one kernel per step): on GPUs, not under 16-mixed,
        where GradScaler must unscale before clipping."""
        return ctx.accelerator == "gpu" and ctx.precision != "16-mixed"

    def clip_gradients(self, model: torch.nn.Module, max_norm: float) -> None:
        """Clip gradients to a global norm (the recipe calls it after backward, before the step).

        The default fits DDP and FSDP2 (DTensor gradients make the norm global); backends that clip
        inside their own step (DeepSpeed) make it a no-op.
        """
        import torch

        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)

    def release_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        """Free the gradients right after each optimizer step (the recipe calls it then).

        Lightning zeroes them only inside the next step's closure, after that step's forward, so without this the
        previous step's gradients (4 bytes per parameter under fp32 masters, per rank its shard) live through the
        whole forward and the loss, where the peak is: 4.1 GiB on llama-1b under FSDP2 on one H200. Hugging Face's
        Trainer frees them after the step too. The default fits DDP and FSDP2; backends that keep gradients in
        buffers of their own and clear them in their own step (DeepSpeed) make it a no-op.
        """
        optimizer.zero_grad(set_to_none=True)

    def warnings(self, ctx: RunContext) -> list[str]:
        """What the user should read about this run under this backend before it starts (printed as `recipe: warning:`
        by run and plan): an option that does nothing here, or one not yet checked where it runs. Default: none."""
        return []

    def after_optimizer_step(self, model: torch.nn.Module, ctx: RunContext) -> None:
        """Right after each optimizer step and release_gradients: what the backend prepares from the new weights for
        the next forward (FSDP2 under --float8: every float8 weight's scale in one all-reduce). Default: nothing."""

    def model_state_bytes(self, shape: "Shape", work: "Workload") -> Optional["ModelStates"]:
        """Per-rank bytes of parameters, gradients and optimizer states on GPU and CPU (`core.memory`).

        None means "no memory model": `recipe plan` lists the strategy as "no estimate" and the
        selector never picks it.
        """
        return None

    @classmethod
    def read_native_config(cls, path: str) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
        """The user's own config file for this backend (`--deepspeed-config`): (its contents, what it says about
        the run as RunConfig fields, including `strategy`: the preset it describes, notes for the user)."""
        from shardlab.core.errors import UserError

        raise UserError(f"{path}: strategy {cls.__name__} reads no config file of its own")

    def estimate(self, shape: "Shape", work: "Workload") -> Optional["Estimate"]:
        """This strategy's peak memory per rank for a workload (core/memory.py), or None without a memory model."""
        from shardlab.core import memory

        return memory.estimate(self.model_state_bytes(shape, work), shape, work)

    def use_native_config(self, config: dict[str, Any], name: str, ctx: RunContext, spec: OptimizerSpec,
                          hidden_size: int) -> tuple[dict[str, Any], list[str]]:
        """Check the user's own config file for this backend (`--deepspeed-config`) against the run.

        Returns the file as this backend will run it ("auto" values filled; it reaches `lightning_strategy`
        as ctx.native_config) and warnings to show.
        """
        from shardlab.core.errors import UserError

        raise UserError(f"--deepspeed-config {name}: needs a DeepSpeed strategy (zero2, zero3, ...); "
                        f"--strategy {self.name} is not one")

    def external_config(self, fmt: str, ctx: RunContext, spec: OptimizerSpec) -> dict[str, Any]:
        """This run as a config of another tool (`deepspeed` JSON, `accelerate` YAML), for `recipe export-config`."""
        from shardlab.core.errors import UserError

        raise UserError(f"--format {fmt}: strategy '{self.name}' has no {fmt} form; try --format accelerate")

    @abstractmethod
    def precision_plan(self, ctx: RunContext) -> PrecisionPlan:
        """The dtypes this backend uses under ctx.precision and ctx.grad_reduce_dtype (refuse what it cannot do in `check`)."""

    @abstractmethod
    def full_state_dict(self, model: torch.nn.Module) -> Optional[dict[str, torch.Tensor]]:
        """Collective: every rank calls it; rank 0 gets the consolidated fp32 weights on CPU, others None."""

    def portable_state(self, model: torch.nn.Module, optimizer: Any) -> Iterator[tuple[str, Optional[dict[str, torch.Tensor]]]]:
        """Collective, one parameter at a time in `model.named_parameters()` order: (name, {"master", "exp_avg",
        "exp_avg_sq"}: the full tensors in fp32 on CPU) on global rank 0, (name, None) on the others.
        `optimizer` is what the Lightning strategy steps (trainer.optimizers[0])."""
        raise NotImplementedError(f"strategy '{self.name}' writes no portable checkpoint")

    def checkpoint_layout(self, ctx: RunContext) -> dict[str, Any]:
        """What this backend's own checkpoint form depends on besides the strategy and the world size (meta.json
        records it): a resume whose layout differs from the checkpoint's loads its portable copy instead. Default:
        nothing."""
        return {}

    def portable_step(self, optimizer: Any) -> int:
        """Adam's step count (bias correction continues from it)."""
        raise NotImplementedError(f"strategy '{self.name}' writes no portable checkpoint")

    def load_portable(self, model: torch.nn.Module, optimizer: Any, read: Callable[..., torch.Tensor], step: int) -> None:
        """Every rank, before the first optimizer step of a resumed run: set the weights (the master and the
        copy the model computes with), both Adam moments and Adam's step. read(kind, name, rows=None) gives the
        full fp32 tensor of kind "master", "exp_avg" or "exp_avg_sq" (rows=(start, stop): only those rows of dim 0)."""
        raise NotImplementedError(f"strategy '{self.name}' reads no portable checkpoint")

    def why_not_here(self) -> Optional[str]:
        """For `recipe doctor`: what this machine lacks for this backend (a package, a compiled op), or None."""
        return None

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "capabilities": self.capabilities.model_dump()}


@dataclass(frozen=True)
class Preset:
    name: str
    strategy_cls: type[Strategy]
    description: str
    capabilities: Capabilities
    family: str
    """Presets of one family differ only in what they offload (`zero3`, `zero3_offload`, ...)."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    source: str = "built-in"

    def build(self) -> Strategy:
        strategy = self.strategy_cls(**self.kwargs)
        strategy.name, strategy.description, strategy.capabilities = self.name, self.description, self.capabilities
        return strategy
