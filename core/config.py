"""The typed configuration of one run: every field has a docstring that doubles as its CLI help."""
from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Literal, Optional, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from shardlab.core.errors import UserError

Precision = Literal["auto", "32-true", "bf16-mixed", "bf16-true", "16-mixed"]


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_assignment=True)

    strategy: str = "ddp"
    """Strategy preset name (see `recipe strategies`), or `auto`: the selector's choice (see `recipe plan`)."""
    offload: Optional[Literal["optimizer", "all"]] = None
    """Move the optimizer (or optimizer and parameters) to CPU: picks the offloading preset of the strategy's family."""
    offload_ratio: Optional[float] = Field(None, gt=0, le=1)
    """ZeRO-3 optimizer offload only: the share of the optimizer (fp32 weights, Adam moments and their gradients) kept
    on the CPU and stepped there; the rest stays on the GPU and steps there (DeepSpeed's offload_optimizer.ratio);
    default 1: all of it on the CPU."""
    model: str = "tiny"
    """A shipped shape (`recipe models`: tiny, tinyllama-1.1b, llama-2-7b, llama-3.1-8b, llama-3.2-1b, ...; random
    weights), a local HF Llama folder, or, for `recipe plan` only, a config.json or a folder holding just that."""
    data: Optional[str] = None
    """Local .jsonl/.json/.parquet/.csv/.txt/.md file, a folder of them, or a `datasets` save_to_disk folder; tokenised once into SHARDLAB_CACHE/data and reused; default: the corpus shipped with shardlab."""
    data_field: str = Field("text", min_length=1)
    """The field (column) of .jsonl/.json/.parquet/.csv records or a save_to_disk dataset that holds the text."""
    data_format: Literal["auto", "text", "chat", "prompt-completion", "alpaca"] = "auto"
    """What the records are: text (the --data-field column, every token trained on), chat (`messages`: [{role,
    content}]), prompt-completion (`prompt`, `completion`) or alpaca (`instruction`, optional `input`, `output`), the
    last three rendered with the tokenizer's chat template and trained on the assistant's tokens only; auto: found
    from the columns (messages, then prompt + completion, then instruction + output, else text), and said."""
    long_examples: Literal["truncate", "drop"] = "truncate"
    """Chat and instruction examples longer than --seq-len: cut to their first --seq-len tokens, or left out
    (summary.json's data counts both)."""
    val_data: Optional[str] = None
    """Validation data: a path of the kinds --data takes, read with the same --data-format, --data-field and
    --long-examples and cached the same way; its loss is reported, never trained on. Not with --val-split."""
    val_split: Optional[float] = Field(None, gt=0, le=0.5)
    """Hold out this share of --data's blocks for validation (after packing: whole --seq-len blocks, chosen by a
    permutation seeded by --seed, so the same blocks whatever the strategy or world size); the rest is trained on."""
    val_every: Optional[int] = Field(None, ge=1)
    """With --val-data or --val-split: the validation loss every N optimizer steps and after the last; default: after
    the last step only."""
    val_batches: Optional[int] = None
    """With --val-data or --val-split: validate on the first N global batches of the validation set only (N x
    micro-batch x grad-accum x world size sequences, in data order: the same under every strategy and split of the
    global batch); default: all of it."""
    data_workers: Optional[int] = Field(None, ge=1)
    """Processes that tokenise the data (once, in the launching process); default: one per CPU core, at most 8."""
    accelerator: Literal["cpu", "gpu", "auto"] = "auto"
    """Where to run: `auto` takes the GPUs if there are any."""
    devices: Union[int, Literal["auto"]] = "auto"
    """Processes per node: `auto` is every GPU, or 2 CPU processes."""
    num_nodes: int = Field(1, ge=1)
    """Number of nodes."""
    precision: Precision = "auto"
    """Lightning precision; `auto` is bf16-mixed on a GPU with bf16, else 32-true."""
    max_steps: int = Field(50, ge=1)
    """Optimizer steps to train."""
    micro_batch_size: Union[int, Literal["auto"], None] = None
    """Sequences per rank per forward pass, or `auto`: the largest the memory estimate fits; default 4 on CPU, auto on GPUs."""
    global_batch_size: Optional[int] = Field(None, ge=1)
    """Sequences per optimizer step over all ranks; sets the accumulation to N / (micro-batch x world size)."""
    grad_accum: Optional[int] = Field(None, ge=1)
    """Micro-batches accumulated per optimizer step; default 1, or, when `--strategy auto` picks CPU offload
    on GPUs, enough for 131,072 tokens per GPU per step (the selector says how many and why)."""
    seq_len: Optional[int] = Field(None, ge=8)
    """Tokens per training sequence; default: the model's context up to 2048 (the tiny test shapes: 128)."""
    lr: float = Field(1e-3, gt=0, lt=1)
    """AdamW peak learning rate."""
    lr_schedule: Literal["constant", "cosine", "linear"] = "constant"
    """After warm-up: keep lr, or decay it (cosine or linear) to min_lr_ratio x lr at max_steps."""
    warmup_steps: int = Field(0, ge=0)
    """Optimizer steps of linear warm-up from 0 to lr."""
    min_lr_ratio: float = Field(0.1, ge=0, le=1)
    """Where a decaying schedule ends, as a fraction of lr."""
    weight_decay: float = Field(0.0, ge=0)
    """AdamW weight decay."""
    adam_beta1: float = Field(0.9, ge=0, lt=1)
    """AdamW beta1."""
    adam_beta2: float = Field(0.95, ge=0, lt=1)
    """AdamW beta2."""
    adam_eps: float = Field(1e-8, gt=0, lt=1)
    """AdamW epsilon."""
    loss_scale_initial_power: int = Field(16, ge=0, le=64)
    """16-mixed: initial loss scale 2**N (DeepSpeed initial_scale_power, GradScaler init_scale)."""
    loss_scale_window: int = Field(1000, ge=1)
    """16-mixed: overflow-free steps before the scale grows (DeepSpeed loss_scale_window, GradScaler growth_interval)."""
    loss_scale_hysteresis: int = Field(2, ge=1)
    """16-mixed, DeepSpeed only: overflows tolerated before the scale drops (GradScaler has no such knob)."""
    loss_scale_min: float = Field(1.0, gt=0)
    """16-mixed, DeepSpeed only: the scale never drops below this (GradScaler has no such knob)."""
    metrics: Literal["none", "csv", "tensorboard", "both"] = "csv"
    """Per-step metrics (loss, lr, step time, tokens/s; val_loss where the run validates) to OUTPUT/logs: CSV,
    TensorBoard, both or none."""
    grad_clip: float = Field(1.0, ge=0)
    """Clip gradients to this global norm; 0 turns clipping off."""
    activation_checkpointing: Optional[bool] = None
    """Recompute each decoder layer's activations in backward instead of keeping them; default: off, unless `--strategy auto` needs it to fit without (more) CPU offload (it says so); given either way, it is never overridden."""
    compile: Optional[bool] = None
    """torch.compile each decoder layer; default: off with Liger kernels (the GPU default where installed), else on for GPU runs of the strategies measured faster with it (ddp, fsdp, zero2); with --kernels liger the compiled layers run torch's norm, RoPE and SwiGLU (Dynamo cannot trace Liger's) and only the loss is Liger's."""
    float8: bool = False
    """Decoder layers' linear layers multiply in float8 (torchao: dynamic per-tensor scales, e4m3 forward, e5m2
    gradients; under fsdp the weights are also all-gathered in float8); with bf16-mixed or bf16-true only, opt-in:
    check it against bf16 with `recipe compare --strategies fsdp,fsdp:float8`; needs `pip install 'shardlab[float8]'`."""
    experiments: Optional[list[str]] = None
    """The chosen preset's levers (`recipe strategies` lists each preset's): changes to speed or memory, not to what
    is trained; several comma-separated (in a YAML config: a list, or the same string); default: those the preset
    turns on (measured faster on a GPU with the same losses); `none` for none, e.g. to compare against the backend's
    stock behaviour."""
    chunked_loss: bool = False
    """Compute the output projection and loss per chunk of 4096 tokens, never the full fp32 logits."""
    kernels: Optional[Literal["torch", "liger"]] = None
    """liger: Liger's fused Triton kernels (RMSNorm, RoPE, SwiGLU, linear cross-entropy without logits; under --compile the loss only), CUDA GPUs only, pip install 'shardlab[gpu]'; default: liger on GPUs where installed (as fast as --compile --kernels torch at 5.6 GiB less on llama-1b), else torch."""
    fused_adds: Optional[bool] = None
    """Fold the decoder layers' elementwise adds into the kernels beside them (the projections' input gradients summed
    by accumulating GEMMs, the attention's residual add in Liger's fused add + RMSNorm, the MLP's in down_proj's GEMM):
    the same model, fewer kernels; Llama models without projection biases, not with --compile (Inductor fuses them
    itself); default: on for GPU runs with Liger's kernels of the presets measured faster with it (fsdp, zero3), off
    elsewhere."""
    expandable_segments: Optional[bool] = None
    """GPU runs: PyTorch's caching allocator maps its memory in expandable segments (PYTORCH_CUDA_ALLOC_CONF's
    expandable_segments:True, torchtitan's default): each block is split off to what the tensor asks for, where torch's
    default hands out a cached block whole when under 1 MiB would be left over, and freed memory is less fragmented;
    the same speed on one H100, fsdp's peak 2.1 MB lower on llama-1b and 4.2 MB on the Llama-3.2-3B shape (zero3's the
    same). Default: on for GPU runs, unless PYTORCH_CUDA_ALLOC_CONF or PYTORCH_ALLOC_CONF is set (then that decides);
    GPU runs only."""
    checkpoint_every: int = Field(0, ge=0)
    """Write a checkpoint every N optimizer steps to OUTPUT/checkpoints/step-NNNNNN (0: never)."""
    keep_checkpoints: int = Field(2, ge=1)
    """How many of the newest checkpoints to keep."""
    portable_checkpoints: bool = True
    """Each checkpoint also holds a portable copy (each parameter's fp32 weight and Adam moments, 12 bytes per
    parameter): another strategy or world size can resume it, and `recipe export` reads it. --no-portable-checkpoints
    writes only the backend's own form (that strategy and world size only)."""
    resume: Optional[str] = None
    """Continue a run: `latest` (what `--resume` alone means: the newest under OUTPUT/checkpoints) or a step-NNNNNN folder."""
    export: bool = True
    """Write and verify the consolidated Hugging Face folder hf/ at the end."""
    deepspeed_config: Optional[str] = None
    """Your ds_config.json: "auto" values filled from the run, checked against the flags; needs a zero* strategy."""
    grad_reduce_dtype: Literal["auto", "fp32", "bf16"] = "auto"
    """dtype gradients are reduced in across ranks; `auto` is each backend's own default."""
    gpus: Optional[int] = Field(None, ge=0)
    """Hardware to plan for: GPUs per node (default: those visible here)."""
    gpu_memory_gib: Optional[float] = Field(None, gt=0, le=1024)
    """Hardware to plan for: memory of one GPU in GiB (default: measured here)."""
    cpu_memory_gib: Optional[float] = Field(None, gt=0, le=65536)
    """Hardware to plan for: CPU memory of one node in GiB (default: measured here)."""
    memory_headroom: float = 0.1
    """Share of memory a plan leaves free, in [0, 0.5): a strategy fits when its estimate is within (1 - this) of each GPU's memory and of each node's CPU memory (room for the estimate's error, fragmentation, CUDA and NCCL buffers); 0 fits to the last byte."""
    launcher: Literal["torchrun", "slurm"] = "torchrun"
    """`recipe launch`: torchrun starts this node's processes; slurm runs one task per process under srun."""
    node_rank: Optional[int] = Field(None, ge=0)
    """`recipe launch`: this node's rank, 0 .. num-nodes - 1."""
    master_addr: Optional[str] = None
    """`recipe launch`: address of node 0, reachable from every node."""
    master_port: Optional[int] = Field(None, ge=1, le=65535)
    """`recipe launch`: a free TCP port on node 0, the same on every node."""
    seed: int = Field(42, ge=0)
    """Seed for the initial weights of a shipped config and the data order."""
    output: Optional[str] = None
    """Run folder for summary.json and hf/; default runs/STRATEGY."""

    @model_validator(mode="after")
    def _cross_field(self) -> "RunConfig":
        """Checks that involve two fields; each message names both."""
        if self.node_rank is not None and self.node_rank >= self.num_nodes:
            raise ValueError(f"--node-rank {self.node_rank}: must be in [0, {self.num_nodes}) for --num-nodes {self.num_nodes}")
        if self.warmup_steps > self.max_steps:
            raise ValueError(f"--warmup-steps {self.warmup_steps} is more than --max-steps {self.max_steps}; "
                             "lower the warm-up or train longer")
        if self.val_data is not None and self.val_split is not None:
            raise ValueError(f"--val-data {self.val_data} and --val-split {self.val_split}: give one of them (a "
                             "validation set of its own, or a share of --data held out)")
        if self.val_every is not None and self.val_data is None and self.val_split is None:
            raise ValueError(f"--val-every {self.val_every}: there is no validation set; give --val-data PATH or "
                             "--val-split F too")
        if self.val_batches is not None and self.val_data is None and self.val_split is None:
            raise ValueError(f"--val-batches {self.val_batches}: there is no validation set; give --val-data PATH or "
                             "--val-split F too")
        if self.fused_adds and self.compile:
            raise ValueError("--fused-adds and --compile: torch.compile fuses these adds itself; give one of them")
        return self

    @field_validator("experiments", mode="before")
    @classmethod
    def _experiment_names(cls, v: Any) -> Any:
        """A comma-separated string (the flag, a YAML string) or a list: the names stripped, without empties and
        repeats, in the order given."""
        if isinstance(v, str):
            v = [v]
        if not isinstance(v, (list, tuple)) or not all(isinstance(item, str) for item in v):
            return v  # pydantic names the type it wanted (None: the preset's defaults)
        names = [n.strip() for item in v for n in item.split(",")]
        return list(dict.fromkeys(n for n in names if n and n != "none"))

    @field_validator("micro_batch_size")
    @classmethod
    def _micro_batch_positive(cls, v: Union[int, str, None]) -> Union[int, str, None]:
        if isinstance(v, int) and v < 1:
            raise ValueError("must be at least 1, or auto")
        return v

    @field_validator("val_batches")
    @classmethod
    def _val_batches_positive(cls, v: Optional[int]) -> Optional[int]:
        if v is not None and v < 1:
            raise ValueError("must be at least 1 (global batches of the validation set to validate on); leave it out "
                             "to validate on the whole set")
        return v

    @field_validator("memory_headroom")
    @classmethod
    def _headroom_fraction(cls, v: float) -> float:
        if not 0 <= v < 0.5:
            raise ValueError("must be a fraction in [0, 0.5), the share of memory left free (0.1: fit within 90%)")
        return v

    @field_validator("devices")
    @classmethod
    def _devices_positive(cls, v: Union[int, str]) -> Union[int, str]:
        if v != "auto" and v < 1:
            raise ValueError("must be at least 1, or auto")
        return v


def field_help(name: str) -> str:
    return RunConfig.model_fields[name].description or ""


def _flag(loc: tuple[Any, ...]) -> str:
    return "--" + str(loc[0]).replace("_", "-")


def describe_errors(err: ValidationError, config_file: Optional[str] = None) -> str:
    """All problems of a config on one line, each naming its flag; an unknown key names the YAML file it is in
    (config_file: flags cannot give one) and the field it is closest to."""
    parts = []
    for e in err.errors():
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            key = str(e["loc"][0])
            where = f" ({key} in --config {config_file})" if config_file else ""
            close = difflib.get_close_matches(key, RunConfig.model_fields, n=1)
            msg = f"unknown field{where}; " + (f"did you mean {close[0]} ({_flag(tuple(close))})?" if close
                                               else "known: " + ", ".join(RunConfig.model_fields))
        if not e["loc"]:  # a cross-field check: its message names both flags
            parts.append(msg)
            continue
        given = "" if e["type"] == "extra_forbidden" else f" (got {e.get('input')!r})"
        parts.append(f"{_flag(e['loc'])}: {msg}{given}")
    return "; ".join(parts)


def load_config(yaml_path: Optional[str], overrides: dict[str, Any]) -> RunConfig:
    """YAML file first, then the flags the user gave; every problem reported at once."""
    values: dict[str, Any] = {}
    if yaml_path:
        path = Path(yaml_path)
        if not path.is_file():
            raise UserError(f"--config {yaml_path}: no such file; give the path of a YAML run config")
        try:
            loaded = yaml.safe_load(path.read_text())
        except yaml.YAMLError as e:
            raise UserError(f"--config {yaml_path}: not valid YAML ({str(e).splitlines()[0]}); fix the file") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise UserError(f"--config {yaml_path}: expected a mapping of field: value, got {type(loaded).__name__}")
        values.update({k.replace("-", "_"): v for k, v in (loaded or {}).items()})
    values.update(overrides)
    try:
        return RunConfig(**values)
    except ValidationError as e:
        raise UserError(describe_errors(e, yaml_path)) from None


def same_value(a: Any, b: Any) -> bool:
    """A flag's value and a file's (YAML, ds_config.json) agree: numbers by value (1e-3 == 0.001, 16 == 16.0)."""
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return a == b
