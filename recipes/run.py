"""`recipe run`: validate everything, then train one strategy and write summary.json and hf/."""
from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch

from shardlab.core import registry
from shardlab.core.config import RunConfig, load_config
from shardlab.core.errors import RunFailed, UserError
from shardlab.core.resolved import ResolvedRun, write_json_atomic
from shardlab.core.strategy import RunContext
from shardlab.recipes import data as data_lib, diagnostics
from shardlab.recipes.data_cache import DataCache, open_blocks, prepare_data
from shardlab.recipes.data_load import find_source
from shardlab.recipes.model import SHIPPED, cache_dir, flops_per_token, initial_folder
from shardlab.recipes.resolve import allocator_env, resolve_run
from shardlab.recipes.validation import cap_note, prepare_validation, split_for_validation, validation_flag
from shardlab.recipes.weights import check_weights, model_source

# Dense bf16 peak per GPU for MFU (vendor datasheets; H200 has the H100's compute).
PEAK_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from shardlab.recipes.flags import add_run_arguments

    add_run_arguments(parser)


HANDOFF_ENV = "SHARDLAB_HANDOFF"  # set for the rank processes: the prepared run, so they neither plan nor tokenise


@dataclass
class Prepared:
    """A run resolved and checked, with its data and initial weights: what every rank trains from."""

    run: ResolvedRun
    folder: Path
    """The Hugging Face folder of the initial weights."""
    blocks: Path
    """The token blocks on disk: a .npy of uint32 [sequences, seq_len] that each rank memory-maps."""
    data: dict
    """summary.json's `data`: format, records, sequences, tokens, label_tokens, truncated, dropped, cache."""
    resume: Optional[Path] = None
    portable: bool = False
    """Resume from the checkpoint's portable copy: it was written by another strategy or world size, or in another
    layout of the backend's own form (Strategy.checkpoint_layout; zero3's sub-groups)."""
    data_note: str = ""
    """What the launching process says of the data, a line or two (recipes/run.py _data_note); the ranks do not say it."""
    labels: Optional[Path] = None
    """Chat and instruction data: the labels of the blocks (.npy of int32, -100 where not a target), memory-mapped too."""
    val_blocks: Optional[Path] = None
    """--val-data: its blocks (cached as --data's); --val-split holds out rows of `blocks` instead (recipes/validation.py)."""
    val_labels: Optional[Path] = None

    @property
    def cfg(self) -> RunConfig:
        return self.run.config

    def save(self, path: Path) -> None:
        """For the rank processes (torch.save of plain types; loads with weights_only=True)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        torch.save({"run": self.run.model_dump_json(), "folder": str(self.folder), "blocks": str(self.blocks),
                    "data": self.data, "labels": str(self.labels) if self.labels else None,
                    "val_blocks": str(self.val_blocks) if self.val_blocks else None,
                    "val_labels": str(self.val_labels) if self.val_labels else None,
                    "resume": str(self.resume) if self.resume else None, "portable": self.portable}, tmp)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path) -> "Prepared":
        d = torch.load(path, weights_only=True)
        return cls(run=ResolvedRun.model_validate_json(d["run"]), folder=Path(d["folder"]), blocks=Path(d["blocks"]),
                   data=d["data"], resume=Path(d["resume"]) if d["resume"] else None, portable=bool(d.get("portable")),
                   labels=Path(d["labels"]) if d.get("labels") else None,
                   val_blocks=Path(d["val_blocks"]) if d.get("val_blocks") else None,
                   val_labels=Path(d["val_labels"]) if d.get("val_labels") else None)


def prepare(cfg: RunConfig) -> Prepared:
    """Everything that can fail on bad input, before any process starts or anything is written to --output."""
    run = resolve_run(cfg)
    c = run.config
    check_output(c.output)
    diagnostics.check(c.strategy, tuple(c.experiments or ()), c.max_steps)  # SHARDLAB_AB
    find_source(c.data, data_lib.embedded_corpus_path())  # before building weights: cheap failures first
    if c.val_data is not None:
        with validation_flag():
            find_source(c.val_data, data_lib.embedded_corpus_path())
    folder = initial_folder(c.model, c.seed)

    def model_cfg():  # transformers' config class imports its model code (seconds): only where it is needed
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(folder)

    if c.model not in SHIPPED:  # a shipped shape's folder was written from its own config (recipes/model.py)
        check_weights(folder, model_cfg())
    data = prepare_data(c.data, c.data_field, c.seq_len, folder, c.data_workers, cache_dir(), c.data_format,
                        c.long_examples)
    data_lib.check_enough(data.sequences, c.micro_batch_size, run.world_size, c.seq_len, c.grad_accum)
    validation, val = prepare_validation(c, data.sequences, folder, run.world_size)
    summary = {**data.summary(), **({"validation": validation} if validation else {})}
    run = run.model_copy(update={"warnings": [*run.warnings, *data.warnings, *(val.warnings if val else [])]})
    resume, elsewhere = None, False
    if c.resume:
        from shardlab.recipes import checkpoint

        # an intact checkpoint (manifest checked) that continues this run, before any rank starts or OUTPUT changes
        resume, passed_over = checkpoint.resolve_resume(c.resume, Path(c.output))
        layout = registry.get(c.strategy).build().checkpoint_layout(run.context())
        identity = checkpoint.run_identity(c, c.strategy, run.world_size, model_cfg(), data.meta["format"], layout)
        elsewhere = checkpoint.check_resume(resume, identity, c.max_steps)
        if passed_over:
            run = run.model_copy(update={"warnings": [*run.warnings, passed_over]})
    note = _data_note(data) + ("".join(f"\nvalidation: {line}" for line in _data_note(val).splitlines()) if val
                               else _split_note(c.val_split, summary)) + cap_note(c.val_batches, validation)
    return Prepared(run=run, folder=folder, blocks=data.blocks_file, data=summary, resume=resume,
                    portable=bool(c.resume) and elsewhere, data_note=note, labels=data.labels_file,
                    val_blocks=val.blocks_file if val else None, val_labels=val.labels_file if val else None)


def _split_note(fraction: Optional[float], summary: dict) -> str:
    if fraction is None:
        return ""
    v = summary["validation"]
    return (f"\nvalidation: --val-split {fraction}: {v['sequences']} of the {summary['sequences']} sequences held out "
            f"(seeded by --seed), {v['trained_sequences']} trained on")


def _data_note(data: DataCache) -> str:
    """What the announcement says of the data: what --data-format auto found in records, its counts, and whether it
    was tokenised now or found tokenised."""
    m = data.meta
    how = (f"tokenised in {data.seconds:.1f} s over {m['workers']} process(es) into" if data.built
           else "found tokenised in")
    found = f"--data-format auto: {m['found']}\n" if m.get("found") else ""
    if m["format"] == "text":
        dropped = f", {m['dropped']} empty dropped" if m["dropped"] else ""
        return (f"{found}data: {m['sequences']} sequences of {m['seq_len']} tokens from {m['records']} document(s)"
                f"{dropped} ({m['format']}); {how} {data.folder}")
    return (f"{found}data: {m['sequences']} sequences of {m['seq_len']} tokens from {m['records']} {m['format']} "
            f"example(s): {m['label_tokens']:,} assistant tokens trained on, {m['padding']:,} padding, {m['truncated']} "
            f"cut to --seq-len, {m['dropped']} dropped; rendered with {m['template']}; {how} {data.folder}")


def check_output(output: str) -> None:
    """--output is a folder, or will be one: neither it nor a folder above it may be an existing file."""
    path = Path(output)
    for above in (path, *path.parents):
        if above.is_dir():
            return
        if above.exists():
            what = "is a file" if above == path else f"{above} is a file"
            raise UserError(f"--output {output}: {what}, not a folder; give a new or existing folder for the run "
                            f"(default runs/STRATEGY)")


def train(p: Prepared) -> dict[str, Any] | None:
    """Runs on every rank; global rank 0 writes summary.json and gets the summary, the others None."""
    import lightning.pytorch as pl

    from shardlab.recipes.datamodule import LlamaData
    from shardlab.recipes.evaluate import Validation
    from shardlab.recipes.export import HFExport
    from shardlab.recipes.metrics import StepRecorder
    from shardlab.recipes.module import LlamaModule
    from shardlab.recipes.progress import StepProgress

    import transformers
    from transformers import AutoConfig

    transformers.utils.logging.disable_progress_bar()
    cfg, ctx = p.cfg, p.run.context()
    env = allocator_env()  # --expandable-segments, before this rank's first CUDA tensor, unless the environment says it
    if cfg.accelerator == "gpu" and (env is None or env[1] != cfg.expandable_segments):
        torch.cuda.memory._set_allocator_settings(f"expandable_segments:{bool(cfg.expandable_segments)}")
    strategy = registry.get(cfg.strategy).build()
    model_cfg = AutoConfig.from_pretrained(p.folder)
    output = Path(cfg.output)
    pl.seed_everything(cfg.seed, verbose=False)
    module = LlamaModule(model_source(p.folder), strategy, ctx, p.run.optimizer())
    recorder = StepRecorder()
    blocks = open_blocks(p.blocks)  # memory-mapped: this rank reads only the rows it trains on
    labels = open_blocks(p.labels) if p.labels else None  # and the labels of those rows and of its global batches
    # --val-split: training on the rows it leaves, validation on the rows it holds out; --val-data: its own blocks;
    # --val-batches: only the first of them, as many as the launching process counted
    validated = p.data.get("validation", {}).get("validated_sequences")
    train_blocks, train_labels, val = split_for_validation(blocks, labels, cfg.val_split, cfg.seed, p.val_blocks,
                                                           p.val_labels, limit=validated)
    probe = torch.from_numpy(blocks[:2].astype("int64"))
    export = HFExport(str(p.folder), output, probe=probe, precision=ctx.precision, float8=ctx.float8) if cfg.export else None
    callbacks: list = [recorder]  # first: a checkpoint written at the same step carries that step's loss
    if val is not None:  # after the recorder, before the progress line and any checkpoint of the same step
        callbacks.append(Validation(val, recorder, cfg.val_every, cfg.micro_batch_size))
    callbacks.append(StepProgress(recorder))  # step N/max, loss, tokens/s, time left; instead of Lightning's bar
    if cfg.checkpoint_every:
        from shardlab.recipes.checkpoint import PeriodicCheckpoint, run_identity

        identity = run_identity(cfg, cfg.strategy, ctx.world_size, model_cfg, p.data["format"],
                                strategy.checkpoint_layout(ctx))
        portable = cfg.portable_checkpoints and strategy.capabilities.portable_checkpoint
        callbacks.append(PeriodicCheckpoint(output / "checkpoints", cfg.checkpoint_every, cfg.keep_checkpoints, identity,
                                            portable=portable, model_folder=str(p.folder)))
    diagnosing = diagnostics.callbacks(ctx.accelerator)  # SHARDLAB_MEMORY_SNAPSHOT, SHARDLAB_PROFILE, SHARDLAB_AB
    callbacks += diagnosing
    lightning_strategy = strategy.lightning_strategy(ctx)
    ckpt_path = str(p.resume / "state") if p.resume else None
    if p.resume:
        from shardlab.recipes.checkpoint import RestoreRNG

        callbacks.append(RestoreRNG(p.resume))
    if p.portable:  # another strategy or world size: the loops from train.pt, the tensors in on_train_start
        from shardlab.recipes import portable

        ckpt_path = portable.resume_from(lightning_strategy, p.resume / "portable")
        loader = portable.LoadPortable(p.resume / "portable")
        callbacks.append(loader)
    trainer = pl.Trainer(
        accelerator=ctx.accelerator, devices=ctx.devices, num_nodes=ctx.num_nodes,
        strategy=lightning_strategy, max_steps=cfg.max_steps,
        accumulate_grad_batches=cfg.grad_accum, use_distributed_sampler=False,  # our sampler: same order for all
        logger=_loggers(cfg.metrics, output), enable_checkpointing=False, enable_model_summary=False, default_root_dir=str(output),
        callbacks=callbacks + ([export] if export else []), **strategy.trainer_kwargs(ctx),
    )
    t0 = time.perf_counter()
    try:
        trainer.fit(module, datamodule=LlamaData(train_blocks, cfg.micro_batch_size, cfg.seed, cfg.grad_accum, train_labels),
                    ckpt_path=ckpt_path)
    except torch.OutOfMemoryError as e:
        raise RunFailed(out_of_memory_advice(p, e)) from None
    wall = time.perf_counter() - t0
    tokens_per_step = cfg.micro_batch_size * cfg.seq_len * cfg.grad_accum * ctx.world_size
    tokens_per_s = tokens_per_step / recorder.median_step_s()
    summary = {
        "strategy": cfg.strategy, "world_size": ctx.world_size, "precision": ctx.precision,
        "losses": recorder.losses, "val_losses": recorder.val_losses, "tokens_per_s": tokens_per_s, "peak_memory_bytes": recorder.peaks,
        "peak_cpu_bytes": recorder.cpu_peaks, "peak_requested_bytes": recorder.requested_peaks,
        "wall_s": wall, "hf_export": str(output / "hf") if export else None, "step_s": recorder.step_s,
        "mfu": _mfu(tokens_per_s / ctx.world_size, model_cfg, cfg.seq_len, ctx),
        "export_check": {"max_abs_logit_diff": export.max_abs_diff, "relative": export.rel_diff} if export else None,
        "memory_estimate": p.run.estimate, "data": p.data,
        "resumed_from": str(p.resume) if p.resume else None,
        "resumed_through": ("portable copy" if p.portable else "native state") if p.resume else None,
        "portable_load_s": getattr(loader, "seconds", None) if p.portable else None,
        "auto": p.run.auto, "decisions": p.run.decisions, "float8_linears": _float8_linears(module.model, ctx),
        "config": cfg.model_dump(), "model_folder": str(p.folder), "model": p.run.model,
        "device": torch.cuda.get_device_name() if ctx.accelerator == "gpu" else "cpu",
        "lever_ab": diagnostics.lever_ab(diagnosing, recorder.step_s, tokens_per_step),
        "cpu_threads": torch.get_num_threads(),  # per rank: the node's cores shared out among its ranks (recipes/ranks.py)
    }
    if trainer.global_rank != 0:
        return None
    write_json_atomic(output / "summary.json", summary)
    return summary


def out_of_memory_advice(p: Prepared, error: BaseException) -> str:
    """Out of GPU memory: what the estimate said, and what `recipe plan` would have chosen instead."""
    first = str(error).strip().splitlines()[0][:160] if str(error).strip() else "out of memory"
    est = p.run.estimate
    said = f" (estimated {est['gpu_bytes'] / 2**30:.1f} GiB per rank)" if est else ""
    try:
        auto = resolve_run(p.cfg.model_copy(update={"strategy": "auto", "offload": None, "resume": None})).auto
        advice = f"recipe plan would choose {auto['choice']}: " + " ".join(auto["reasons"])
    except UserError as e:
        advice = f"recipe plan finds nothing that fits: {e}"
    return (f"out of GPU memory under {p.cfg.strategy}{said}: {first}; {advice}; "
            f"run `recipe plan` with this run's flags for the table")


def _loggers(kind: str, output: Path) -> list:
    """OUTPUT/logs/csv and OUTPUT/logs/tensorboard, continued by a resumed run (recipes/logs.py)."""
    from shardlab.recipes.logs import ContinuedCSVLogger, ContinuedTensorBoardLogger

    loggers = []
    if kind in ("csv", "both"):
        loggers.append(ContinuedCSVLogger(output))
    if kind in ("tensorboard", "both"):
        loggers.append(ContinuedTensorBoardLogger(output))
    return loggers or False


def _mfu(tokens_per_s_per_device: float, model_cfg, seq_len: int, ctx: RunContext) -> float | None:
    if ctx.accelerator != "gpu":
        return None
    name = torch.cuda.get_device_name()
    peak = next((v for k, v in PEAK_FLOPS.items() if k in name), None)
    return tokens_per_s_per_device * flops_per_token(model_cfg, seq_len) / peak if peak else None


def _float8_linears(model, ctx: RunContext) -> int:
    """How many linears trained in float8 (--float8; 0 without it): the summary's proof that it took effect."""
    if not ctx.float8:
        return 0
    from shardlab.recipes import float8

    return float8.count(model)


def _leave_process_group() -> None:
    """A single process (no launcher) leaves its process group before the interpreter exits; rank
    processes end through ranks.finish_rank instead."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def announce(run: ResolvedRun) -> None:
    """What the launching process tells the user before training: the choice, its reasons, what was decided."""
    c = run.config
    if run.auto:
        print(f"shardlab: --strategy auto chose {run.auto['choice']}:")
        for reason in run.auto["reasons"]:
            print(f"  - {reason}")
    for decision in run.decisions:
        print(f"shardlab: {decision}")
    for line in run.warnings:
        print(f"recipe: warning: {line}", file=sys.stderr)
    levers = (" + float8 linears" if c.float8 else "") + (
        f" + experiments {','.join(c.experiments)}" if c.experiments else "")
    print(f"shardlab: {c.strategy} on {run.world_size} x {c.accelerator}, {c.precision}{levers}, model {c.model}, "
          f"micro-batch {c.micro_batch_size} x seq {c.seq_len} x accumulation {c.grad_accum}, output {c.output}", flush=True)


def main(args: argparse.Namespace) -> int:
    from shardlab.recipes import interrupted, ranks

    ranks.die_with_launcher()
    handoff = os.environ.get(HANDOFF_ENV)
    if handoff:  # a rank this process's launcher started: the run is prepared already
        p = Prepared.load(Path(handoff))
    else:
        overrides = {k: v for k, v in vars(args).items() if k in RunConfig.model_fields}
        cfg = load_config(getattr(args, "config", None), overrides)
        if cfg.launcher == "slurm" and not ranks.launched_here():
            raise UserError("--launcher slurm: `recipe run` starts its processes on this machine and ignores it; "
                            "use `recipe launch --launcher slurm` (or `recipe launch --print --launcher slurm` for an "
                            "sbatch script)")
        p = prepare(cfg)
    in_rank = ranks.launched_here()
    if not in_rank or (os.environ.get("LOCAL_RANK", "0") == "0" and ranks.LAUNCHED_ENV not in os.environ):
        announce(p.run)
        for line in p.data_note.splitlines():
            print(f"shardlab: {line}", flush=True)
    if not in_rank and p.cfg.num_nodes == 1 and p.cfg.devices > 1:
        # one process per rank, watched: a rank that dies stops the others at once (recipes/ranks.py).
        # They read the prepared run from a file: nothing is probed, planned or tokenised again.
        output = Path(p.cfg.output)
        p.run.save(output / "resolved.json")
        file = output / ".prepared.pt"
        p.save(file)
        os.environ[HANDOFF_ENV] = str(file.resolve())
        started = time.time()
        try:
            ranks.run_ranks(p.cfg.devices, args.argv)
        except KeyboardInterrupt:  # Ctrl-C: every rank has stopped
            raise interrupted.stopped(p.cfg, started) from None
        finally:
            os.environ.pop(HANDOFF_ENV, None)
            file.unlink(missing_ok=True)
        return 0
    if not in_rank:
        p.run.save(Path(p.cfg.output) / "resolved.json")
    started = time.time()
    try:
        summary = train(p)
    except (KeyboardInterrupt, SystemExit) as e:  # Lightning answers Ctrl-C with sys.exit(1) after its teardown
        if in_rank or not (isinstance(e, KeyboardInterrupt) or isinstance(e.__context__, KeyboardInterrupt)):
            raise
        raise interrupted.stopped(p.cfg, started) from None
    if not in_rank:
        _leave_process_group()
    if summary is not None:  # global rank 0
        val = f", validation loss {summary['val_losses'][-1]['loss']:.4f}" if summary["val_losses"] else ""
        print(f"shardlab: loss {summary['losses'][0]:.4f} -> {summary['losses'][-1]:.4f}{val}, "
              f"{summary['tokens_per_s']:.0f} tokens/s, summary {Path(p.cfg.output) / 'summary.json'}")
        if summary["lever_ab"]:
            from shardlab.recipes.lever_ab import line

            print(f"shardlab: {line(summary['lever_ab'])}")
    if in_rank:
        ranks.finish_rank()
    return 0
