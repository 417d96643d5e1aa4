"""`recipe plan`: every strategy's memory estimate on the given hardware, and the selector's choice."""
from __future__ import annotations

import argparse
import dataclasses
import json

from shardlab.core import memory, registry, selector
from shardlab.core.config import RunConfig, load_config
from shardlab.core.errors import UserError
from shardlab.core.hardware import GiB, Hardware, probe
from shardlab.core.strategy import RunContext
from shardlab.recipes.model import model_config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from shardlab.recipes.run import add_run_arguments

    parser.add_argument("--json", action="store_true", help="print one JSON object: choice, reasons, strategies")
    parser.add_argument("--show-config", action="store_true",
                        help="print the run's config with every default and `auto` resolved, as YAML")
    add_run_arguments(parser)


def workload(cfg: RunConfig, per_node: int, precision: str) -> memory.Workload:
    """The run as the memory estimate sees it: for recipe plan, the selector and recipe run alike."""
    return memory.Workload(micro_batch_size=cfg.micro_batch_size, seq_len=cfg.seq_len,
                           activation_checkpointing=cfg.activation_checkpointing, precision=precision,
                           gpus_per_node=per_node, num_nodes=cfg.num_nodes,
                           chunked_loss=cfg.chunked_loss or cfg.kernels == "liger")  # Liger's loss never builds logits


def make_plan(cfg: RunConfig) -> tuple[Hardware, memory.Workload, selector.Decision]:
    """Hardware, workload and the decision, from config only: no weights are built or loaded."""
    gpus, gpu_memory_gib, cpu_memory_gib = cfg.gpus, cfg.gpu_memory_gib, cfg.cpu_memory_gib
    if cfg.accelerator == "gpu" and gpus == 0:
        raise UserError("--gpus 0: a GPU run needs at least one GPU; use --accelerator cpu to plan a CPU run")
    if gpus is None and cfg.devices != "auto" and cfg.accelerator != "cpu":
        import torch

        gpus = cfg.devices if torch.cuda.device_count() or gpu_memory_gib else None
    hw = probe(cfg.accelerator, cfg.num_nodes, gpus, gpu_memory_gib, cpu_memory_gib)
    precision = cfg.precision if cfg.precision != "auto" else ("bf16-mixed" if hw.accelerator == "gpu" and hw.bf16 else "32-true")
    shape = memory.shape_of(model_config(cfg.model))
    per_node = hw.gpus_per_node if hw.accelerator == "gpu" else (cfg.devices if cfg.devices != "auto" else 2)
    work = workload(cfg, per_node, precision)
    ctx = RunContext(accelerator=hw.accelerator, devices=work.gpus_per_node, num_nodes=hw.num_nodes, precision=precision,
                     grad_accum=cfg.grad_accum or 1, grad_clip=cfg.grad_clip, micro_batch_size=cfg.micro_batch_size,
                     activation_checkpointing=cfg.activation_checkpointing)
    candidates = {}
    for name, preset in registry.presets().items():
        caps = preset.capabilities
        runnable = (caps.gpu if hw.accelerator == "gpu" else caps.cpu) and precision in caps.precisions \
            and (hw.num_nodes == 1 or caps.multi_node)
        if runnable:
            candidates[name] = (preset, memory.estimate(preset.build(), shape, work))
    return hw, work, selector.choose(hw, shape, work, cfg.offload, candidates, cfg.grad_accum)


# Larger micro-batches fill the GPU better: fsdp with Liger kernels 68,026 -> 73,680 tokens/s (53.0% -> 57.4% MFU)
# from micro-batch 8 to 16 on one H200, llama-1b (results/2026-12-02-liger-h200.md). The global batch changes with
# it, so recipe plan reports the headroom and leaves the choice to the user.
MICRO_BATCH_MEASURED = "fsdp, one H200, llama-1b: 68,026 tokens/s at micro-batch 8, 73,680 at 16"


def largest_micro_batch(cfg: RunConfig, hw: Hardware, work: memory.Workload, choice: str) -> int | None:
    """The largest power-of-two micro-batch (up to 64) the memory estimate fits with `choice` on GPUs, or None."""
    if hw.accelerator != "gpu":
        return None
    strategy, shape = registry.get(choice).build(), memory.shape_of(model_config(cfg.model))
    fitting = [mb for mb in (1, 2, 4, 8, 16, 32, 64)
               if selector.fits(memory.estimate(strategy, shape, dataclasses.replace(work, micro_batch_size=mb)), hw)]
    return max(fitting, default=None)


def apply_decision(cfg: RunConfig, decision: selector.Decision) -> RunConfig:
    """The run as `--strategy auto` decided it: the chosen preset, and the batch it picked (offload), if any."""
    return cfg.model_copy(update={"strategy": decision.choice, "offload": None,
                                  "grad_accum": cfg.grad_accum or decision.grad_accum})


def main(args: argparse.Namespace) -> int:
    overrides = {k: v for k, v in vars(args).items() if k in RunConfig.model_fields}
    cfg = load_config(getattr(args, "config", None), overrides)
    hw, work, decision = make_plan(cfg)
    decided = apply_decision(cfg, decision)
    grad_accum = decided.grad_accum or 1
    rows = [{"name": r.name, "gpu_bytes": r.estimate.gpu_bytes if r.estimate else None,
             "cpu_bytes": r.estimate.cpu_bytes if r.estimate else None, "fits": r.fits, "source": r.source,
             "parts": r.estimate.parts if r.estimate else None} for r in decision.rows]
    if args.show_config:
        import yaml

        resolved = decided.model_copy(update={
            "accelerator": hw.accelerator, "devices": work.gpus_per_node, "grad_accum": grad_accum,
            "precision": work.precision, "output": cfg.output or f"runs/{decision.choice}"})
        print(f"# resolved for {hw.describe()}; `strategy` is the selector's choice when it was auto")
        print(yaml.safe_dump(resolved.model_dump(), sort_keys=False), end="")
        return 0
    headroom = largest_micro_batch(cfg, hw, work, decision.choice)
    shape = memory.shape_of(model_config(cfg.model))  # counted once: shape_of is cached
    if args.json:
        print(json.dumps({"model": {"name": cfg.model, **shape.describe()}, "choice": decision.choice, "grad_accum": grad_accum,
                          "largest_micro_batch": headroom, "reasons": decision.reasons, "strategies": rows,
                          "hardware": hw.model_dump(), "workload": vars(work)}, indent=2))
        return 0
    where = "GPU" if hw.accelerator == "gpu" else "rank"
    size = f"{shape.params / 1e9:.2f}B" if shape.params >= 1e9 else f"{shape.params / 1e6:.2f}M"
    print(f"model: {cfg.model}, {size} parameters{' (tied embeddings)' if shape.tied else ''}")
    print(f"hardware: {hw.describe()}; workload: micro-batch {work.micro_batch_size} x seq {work.seq_len}, "
          f"{work.precision}, activation checkpointing {'on' if work.activation_checkpointing else 'off'}")
    print(f"{'strategy':<20} {'per ' + where:>12} {'CPU per node':>13}  fits")
    for r in rows:
        if r["gpu_bytes"] is None:
            print(f"{r['name']:<20} {'no estimate':>12} {'':>13}  -")
            continue
        print(f"{r['name']:<20} {r['gpu_bytes'] / GiB:>8.1f} GiB {r['cpu_bytes'] / GiB:>9.1f} GiB  {'yes' if r['fits'] else 'no'}")
    print(f"choice: {decision.choice}")
    for reason in decision.reasons:
        print(f"  - {reason}")
    if headroom and headroom > work.micro_batch_size:
        print(f"micro-batch: up to {headroom} fits with {decision.choice} by the estimate (--micro-batch-size); larger ones "
              f"ran faster ({MICRO_BATCH_MEASURED}) but change the global batch")
    return 0
