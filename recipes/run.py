"""`recipe run`: validate everything, then train one strategy and write summary.json and hf/."""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Any, Optional

import torch

from shardlab.core import memory, registry
from shardlab.core.config import RunConfig, field_help, load_config
from shardlab.core.errors import RunFailed, UserError
from shardlab.core.strategy import OptimizerSpec, RunContext
from shardlab.recipes import data as data_lib
from shardlab.recipes.model import flops_per_token, initial_folder
from shardlab.recipes.weights import check_weights, model_source

# Dense bf16 peak per GPU for MFU (vendor datasheets; H200 has the H100's compute).
PEAK_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12}


def add_run_arguments(parser: argparse.ArgumentParser, exclude: tuple[str, ...] = ()) -> None:
    parser.add_argument("--config", help="YAML file with the same fields as the flags; flags override it")
    for name, field in RunConfig.model_fields.items():
        if name in exclude:
            continue
        flag = "--" + name.replace("_", "-")
        help_ = f"{field.description} (default: {field.default})"
        if name == "resume":  # `--resume` alone continues from the latest checkpoint
            parser.add_argument(flag, dest=name, default=argparse.SUPPRESS, nargs="?", const="latest", help=help_)
        elif field.annotation in (bool, Optional[bool]):
            parser.add_argument(flag, dest=name, default=argparse.SUPPRESS, action=argparse.BooleanOptionalAction, help=help_)
        else:
            parser.add_argument(flag, dest=name, default=argparse.SUPPRESS, help=help_)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_arguments(parser)


def resolve(cfg: RunConfig, elsewhere: bool = False) -> RunConfig:
    """Fill every `auto` from the hardware, visibly (the resolved config is printed and saved).

    elsewhere=True resolves for a machine that is not this one (export-config): GPUs need not be visible.
    """
    gpus = torch.cuda.device_count()
    if cfg.accelerator == "gpu" and gpus == 0 and not elsewhere:
        raise UserError("--accelerator gpu: no CUDA GPU is visible here; use --accelerator cpu")
    accelerator = cfg.accelerator if cfg.accelerator != "auto" else ("gpu" if gpus else "cpu")
    if cfg.devices == "auto" and accelerator == "gpu" and gpus == 0:
        raise UserError("--devices: no GPU visible here to count; give the GPUs per node")
    devices = cfg.devices if cfg.devices != "auto" else (gpus if accelerator == "gpu" else 2)
    if accelerator == "gpu" and devices > gpus and not elsewhere:
        raise UserError(f"--devices {devices}: only {gpus} GPU(s) visible; use --devices {gpus} or fewer")
    bf16 = torch.cuda.is_bf16_supported() if gpus else elsewhere
    precision = cfg.precision
    if precision == "auto":
        precision = "bf16-mixed" if accelerator == "gpu" and bf16 else "32-true"
    if accelerator == "cpu" and precision.startswith("16"):
        raise UserError(f"--precision {precision}: fp16 training needs a GPU; on CPU use 32-true or bf16-mixed")
    if accelerator == "gpu" and precision.startswith("bf16") and not bf16:
        raise UserError(f"--precision {precision}: this GPU has no bf16; use 16-mixed or 32-true")
    output = cfg.output or f"runs/{cfg.strategy}"  # after `auto` became a preset name
    return cfg.model_copy(update=dict(accelerator=accelerator, devices=devices, precision=precision, output=output,
                                      grad_accum=cfg.grad_accum or 1))


def build_context(cfg: RunConfig, elsewhere: bool = False):
    """Resolved config, preset, strategy and RunContext; the strategy has refused what it cannot run."""
    preset = registry.with_offload(registry.get(cfg.strategy), cfg.offload)
    cfg = resolve(cfg, elsewhere)
    if cfg.kernels is None:  # Liger measured fastest on one H200 (benchmarks/results/2026-12-02-liger-h200.md)
        from shardlab.recipes import kernels
        cfg = cfg.model_copy(update={"kernels": "torch" if cfg.compile else kernels.default(cfg.accelerator)})
    if cfg.compile is None:  # the measured default (Capabilities.compile_by_default), visible in the saved config
        cfg = cfg.model_copy(update={"compile": cfg.accelerator == "gpu" and preset.capabilities.compile_by_default
                                     and cfg.kernels != "liger"})
    ctx = RunContext(accelerator=cfg.accelerator, devices=cfg.devices, num_nodes=cfg.num_nodes,
                     precision=cfg.precision, grad_accum=cfg.grad_accum, grad_clip=cfg.grad_clip,
                     micro_batch_size=cfg.micro_batch_size, grad_reduce_dtype=cfg.grad_reduce_dtype,
                     activation_checkpointing=cfg.activation_checkpointing,
                     compile=cfg.compile, chunked_loss=cfg.chunked_loss, kernels=cfg.kernels,
                     loss_scale=(cfg.loss_scale_initial_power, cfg.loss_scale_window, cfg.loss_scale_hysteresis,
                                 cfg.loss_scale_min))
    strategy = preset.build()
    if ctx.accelerator == "cpu" and not strategy.capabilities.cpu:
        raise UserError(f"--strategy {preset.name}: has no CPU support; use --accelerator gpu or another strategy")
    if cfg.deepspeed_config:
        from shardlab.core import ds_config
        from shardlab.recipes.model import model_config

        changes, warnings = strategy.use_native_config(ds_config.load(cfg.deepspeed_config), cfg.deepspeed_config, ctx,
                                                       optimizer_spec(cfg), model_config(cfg.model).hidden_size)
        if os.environ.get("LOCAL_RANK", "0") == "0":
            ds_config.warn(warnings)
        cfg = cfg.model_copy(update=changes)
        ctx = dataclasses.replace(ctx, **{k: v for k, v in changes.items() if hasattr(ctx, k)})
    strategy.check(ctx)
    if ctx.kernels == "liger":
        from shardlab.recipes import kernels
        kernels.check(ctx.accelerator, ctx.compile)
    return cfg, preset, strategy, ctx


def optimizer_spec(cfg: RunConfig) -> OptimizerSpec:
    return OptimizerSpec(lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(cfg.adam_beta1, cfg.adam_beta2),
                         eps=cfg.adam_eps, schedule=cfg.lr_schedule, warmup_steps=cfg.warmup_steps,
                         min_lr_ratio=cfg.min_lr_ratio, total_steps=cfg.max_steps)


def prepare(cfg: RunConfig) -> dict[str, Any]:
    """Everything that can fail on bad input, before any process starts or anything is written to --output."""
    from shardlab.recipes.plan import apply_decision, make_plan, workload

    decision = None
    if cfg.strategy == "auto":
        decision = make_plan(cfg)[2]
        cfg = apply_decision(cfg, decision)
    cfg, preset, strategy, ctx = build_context(cfg)
    texts = data_lib.read_texts(cfg.data)  # before building weights: cheap failures first
    folder = initial_folder(cfg.model, cfg.seed)
    from transformers import AutoConfig, AutoTokenizer

    model_cfg = AutoConfig.from_pretrained(folder)
    check_weights(folder, model_cfg)
    if cfg.seq_len > model_cfg.max_position_embeddings:
        raise UserError(f"--seq-len {cfg.seq_len}: the model takes at most {model_cfg.max_position_embeddings} tokens")
    blocks = data_lib.token_blocks(texts, AutoTokenizer.from_pretrained(folder), cfg.seq_len)
    data_lib.check_enough(blocks, cfg.micro_batch_size, ctx.world_size, cfg.seq_len, cfg.grad_accum)
    resume = None
    if cfg.resume:
        from shardlab.recipes import checkpoint

        resume = checkpoint.resolve_resume(cfg.resume, Path(cfg.output))
        checkpoint.check_resume(resume, checkpoint.run_identity(cfg, preset.name, ctx.world_size, model_cfg), cfg.max_steps)
    shape = memory.shape_of(model_cfg)
    estimate = memory.estimate(strategy, shape, workload(cfg, cfg.devices, cfg.precision))
    return dict(cfg=cfg, preset=preset, strategy=strategy, ctx=ctx, folder=folder, model_cfg=model_cfg, blocks=blocks,
                decision=decision, estimate=estimate, resume=resume, shape=shape)


def train(p: dict[str, Any]) -> dict[str, Any] | None:
    """Runs on every rank; global rank 0 writes summary.json and gets the summary, the others None."""
    import lightning.pytorch as pl

    from shardlab.recipes.export import HFExport
    from shardlab.recipes.metrics import StepRecorder
    from shardlab.recipes.module import LlamaModule

    import transformers

    transformers.utils.logging.disable_progress_bar()
    cfg: RunConfig = p["cfg"]
    ctx: RunContext = p["ctx"]
    output = Path(cfg.output)
    pl.seed_everything(cfg.seed, verbose=False)
    module = LlamaModule(model_source(p["folder"]), p["strategy"], ctx, optimizer_spec(cfg))
    recorder = StepRecorder()
    export = HFExport(str(p["folder"]), output, probe=p["blocks"][:2], precision=ctx.precision) if cfg.export else None
    callbacks: list = [recorder]  # first: a checkpoint written at the same step carries that step's loss
    if cfg.checkpoint_every:
        from shardlab.recipes.checkpoint import PeriodicCheckpoint, run_identity

        identity = run_identity(cfg, p["preset"].name, ctx.world_size, p["model_cfg"])
        callbacks.append(PeriodicCheckpoint(output / "checkpoints", cfg.checkpoint_every, cfg.keep_checkpoints, identity))
    if p["resume"]:
        from shardlab.recipes.checkpoint import RestoreRNG

        callbacks.append(RestoreRNG(p["resume"]))
    trainer = pl.Trainer(
        accelerator=ctx.accelerator, devices=ctx.devices, num_nodes=ctx.num_nodes,
        strategy=p["strategy"].lightning_strategy(ctx), max_steps=cfg.max_steps,
        accumulate_grad_batches=cfg.grad_accum, use_distributed_sampler=False,  # our sampler: same order for all
        logger=_loggers(cfg.metrics, output), enable_checkpointing=False, enable_model_summary=False, default_root_dir=str(output),
        callbacks=callbacks + ([export] if export else []), **p["strategy"].trainer_kwargs(ctx),
    )
    t0 = time.perf_counter()
    try:
        trainer.fit(module, datamodule=data_lib.LlamaData(p["blocks"], cfg.micro_batch_size, cfg.seed, cfg.grad_accum),
                    ckpt_path=str(p["resume"] / "state") if p["resume"] else None)
    except torch.OutOfMemoryError as e:
        raise RunFailed(out_of_memory_advice(cfg, p, e)) from None
    wall = time.perf_counter() - t0
    tokens_per_step = cfg.micro_batch_size * cfg.seq_len * cfg.grad_accum * ctx.world_size
    tokens_per_s = tokens_per_step / recorder.median_step_s()
    summary = {
        "strategy": p["preset"].name, "world_size": ctx.world_size, "precision": ctx.precision,
        "losses": recorder.losses, "tokens_per_s": tokens_per_s, "peak_memory_bytes": recorder.peaks,
        "wall_s": wall, "hf_export": str(output / "hf") if export else None, "step_s": recorder.step_s,
        "mfu": _mfu(tokens_per_s / ctx.world_size, p["model_cfg"], cfg.seq_len, ctx),
        "export_check": {"max_abs_logit_diff": export.max_abs_diff, "relative": export.rel_diff} if export else None,
        "memory_estimate": _estimate_dict(p["estimate"]),
        "resumed_from": str(p["resume"]) if p["resume"] else None,
        "auto": {"choice": p["decision"].choice, "reasons": p["decision"].reasons} if p["decision"] else None,
        "config": cfg.model_dump(), "model_folder": str(p["folder"]), "model": {"name": cfg.model, **p["shape"].describe()},
        "device": torch.cuda.get_device_name() if ctx.accelerator == "gpu" else "cpu",
    }
    if trainer.global_rank != 0:
        return None
    write_json_atomic(output / "summary.json", summary)
    return summary


def out_of_memory_advice(cfg: RunConfig, p: dict[str, Any], error: BaseException) -> str:
    """Out of GPU memory: what the estimate said, and what `recipe plan` would have chosen instead."""
    from shardlab.recipes.plan import make_plan

    first = str(error).strip().splitlines()[0][:160] if str(error).strip() else "out of memory"
    est = p["estimate"]
    said = f" (estimated {est.gpu_bytes / 2**30:.1f} GiB per rank)" if est else ""
    try:
        decision = make_plan(cfg.model_copy(update={"strategy": "auto", "offload": None, "resume": None}))[2]
        advice = f"recipe plan would choose {decision.choice}: " + " ".join(decision.reasons)
    except UserError as e:
        advice = f"recipe plan finds nothing that fits: {e}"
    return (f"out of GPU memory under {p['preset'].name}{said}: {first}; {advice}; "
            f"run `recipe plan` with this run's flags for the table")


def _loggers(kind: str, output: Path) -> list:
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    loggers = []
    if kind in ("csv", "both"):
        loggers.append(CSVLogger(output, name="logs", version="csv"))
    if kind in ("tensorboard", "both"):
        loggers.append(TensorBoardLogger(output, name="logs", version="tensorboard", default_hp_metric=False))
    return loggers or False


def _estimate_dict(e) -> dict | None:
    return None if e is None else {"gpu_bytes": e.gpu_bytes, "cpu_bytes": e.cpu_bytes, "parts": e.parts}


def _mfu(tokens_per_s_per_device: float, model_cfg, seq_len: int, ctx: RunContext) -> float | None:
    if ctx.accelerator != "gpu":
        return None
    name = torch.cuda.get_device_name()
    peak = next((v for k, v in PEAK_FLOPS.items() if k in name), None)
    return tokens_per_s_per_device * flops_per_token(model_cfg, seq_len) / peak if peak else None


def _leave_process_group() -> None:
    """A single process (no launcher) leaves its process group before the interpreter exits; rank
    processes end through ranks.finish_rank instead."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def write_json_atomic(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(obj, indent=2))
    os.replace(tmp, path)


def main(args: argparse.Namespace) -> int:
    from shardlab.recipes import ranks

    ranks.die_with_launcher()
    overrides = {k: v for k, v in vars(args).items() if k in RunConfig.model_fields}
    p = prepare(load_config(getattr(args, "config", None), overrides))
    in_rank = ranks.launched_here()
    if not in_rank or (os.environ.get("LOCAL_RANK", "0") == "0" and ranks.LAUNCHED_ENV not in os.environ):
        if p["decision"]:
            print(f"shardlab: --strategy auto chose {p['decision'].choice}:")
            for reason in p["decision"].reasons:
                print(f"  - {reason}")
        print(f"shardlab: {p['preset'].name} on {p['ctx'].world_size} x {p['ctx'].accelerator}, "
              f"{p['ctx'].precision}, model {p['cfg'].model}, output {p['cfg'].output}", flush=True)
    if not in_rank and p["ctx"].num_nodes == 1 and p["ctx"].devices > 1:
        # one process per rank, watched: a rank that dies stops the others at once (recipes/ranks.py)
        ranks.run_ranks(p["ctx"].devices, args.argv)
        return 0
    summary = train(p)
    if not in_rank:
        _leave_process_group()
    if summary is not None:  # global rank 0
        print(f"shardlab: loss {summary['losses'][0]:.4f} -> {summary['losses'][-1]:.4f}, "
              f"{summary['tokens_per_s']:.0f} tokens/s, summary {Path(p['cfg'].output) / 'summary.json'}")
    if in_rank:
        ranks.finish_rank()
    return 0
