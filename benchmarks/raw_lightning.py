"""Raw-Lightning baseline for `benchmarks/test_step_speed.py`: the recipe's training step without shardlab.

Usage (from the repo root; Lightning starts the second process itself):
    python benchmarks/raw_lightning.py ddp|zero2|zero3|fsdp --model-folder DIR --steps N \
        --micro-batch-size M --seq-len S --out FILE.json [--devices 2] [--lr 1e-3] [--grad-clip 1.0] [--seed 42]

The same work as `recipe run --accelerator cpu --devices 2 --precision 32-true` with shardlab's defaults:
the model folder `recipe run` wrote (`summary.json`'s `model_folder`), loaded with
`LlamaForCausalLM.from_pretrained` in `configure_model`; the shipped corpus tokenised with that folder's
tokenizer, joined with EOS and cut into `--seq-len` blocks, dealt out as shardlab deals them (each epoch a
`randperm` seeded with seed + epoch; step k trains on its k-th run of micro-batch x world size blocks, rank r
on the r-th micro-batch of them), so the losses match shardlab's step for step; AdamW with betas (0.9, 0.95), eps 1e-8, no
weight decay, constant lr; gradient clipping to a global norm of 1.0; fp32; processes over gloo.
What it leaves out is shardlab's: the Strategy interface, the per-step loss all-reduce, the LR-scheduler
wrapper, the export and the summary.

Lightning strategies (stock unless said):
- ddp: `DDPStrategy(process_group_backend="gloo")`; clipping by `Trainer(gradient_clip_val=1.0)`.
- fsdp: `ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1)`; `fully_shard` on each
  decoder layer, then the root, in `configure_model`; clipping by `gradient_clip_val`.
- zero2 / zero3: stock `DeepSpeedStrategy` refuses CPU processes (`setup_environment`: "only supported on
  CUDA GPUs"; it also validates CUDA device indices and hands DeepSpeed `device_rank=None`), so this
  baseline uses shardlab's `_LightningDeepSpeed` (strategies/deepspeed_lightning.py), which only removes those
  three CPU obstacles and passes `scale_wrt_gas=False` (a no-op without gradient accumulation), with a
  plain DeepSpeed config: `{"zero_optimization": {"stage": 2|3}, "train_micro_batch_size_per_gpu": M,
  "zero_allow_untested_optimizer": true}`; Lightning fills `gradient_clipping` from `gradient_clip_val`.
  ZeRO-3 builds the model under Lightning's `zero.Init` and loads the folder into the partitioned
  parameters through transformers' own ZeRO-3 path (`HfDeepSpeedConfig`, the documented non-Trainer
  integration; without it `from_pretrained` under `zero.Init` fails in `_init_weights` with an IndexError
  on the empty partitioned embedding).

Step time: wall time from one optimizer step's end to the next (the first from `on_train_start`), as
shardlab's StepRecorder measures it; median after min(5, steps // 2) warm-up steps. Rank 0 writes --out:
`median_step_s`, `tokens_per_s` (micro-batch x seq-len x world size / median step), `step_s`, `losses`
(global mean per step, gathered once after training), `wall_s` (`Trainer.fit`), the Lightning strategy.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from importlib import resources
from pathlib import Path

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, Sampler
from transformers import LlamaForCausalLM  # not first inside zero.Init: its import fails there (torch._dynamo)

STRATEGIES = ("ddp", "zero2", "zero3", "fsdp")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("strategy", choices=STRATEGIES)
    ap.add_argument("--model-folder", required=True, type=Path)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--micro-batch-size", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--devices", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--out", required=True, type=Path)
    return ap.parse_args(argv)


def token_blocks(folder: Path, seq_len: int) -> torch.Tensor:
    """The shipped corpus in [n, seq_len] blocks, tokenised with the folder's tokenizer (text + EOS)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    text = resources.files("shardlab.recipes").joinpath("assets/corpus.txt").read_text(encoding="utf-8")
    ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    n = len(ids) // seq_len
    return torch.tensor(ids[: n * seq_len], dtype=torch.long).view(n, seq_len)


class GlobalBatches(Sampler[int]):
    """This rank's blocks: step k's global batch is order[k*G:(k+1)*G], G = micro-batch x world size, and this
    rank's micro-batch its rank-th slice of micro-batch blocks; an epoch's tail short of a global batch is dropped."""

    def __init__(self, n: int, micro_batch_size: int, world_size: int, rank: int, seed: int) -> None:
        self.n, self.mb, self.world, self.rank, self.seed, self.epoch = n, micro_batch_size, world_size, rank, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.n // (self.mb * self.world) * self.mb

    def __iter__(self):
        order = torch.randperm(self.n, generator=torch.Generator().manual_seed(self.seed + self.epoch)).tolist()
        for start in range(self.rank * self.mb, len(self) * self.world, self.mb * self.world):
            yield from order[start:start + self.mb]


class Blocks(pl.LightningDataModule):
    def __init__(self, blocks: torch.Tensor, micro_batch_size: int, seed: int) -> None:
        super().__init__()
        self.blocks, self.micro_batch_size, self.seed = blocks, micro_batch_size, seed

    def train_dataloader(self) -> DataLoader:
        data = list(self.blocks)
        sampler = GlobalBatches(len(data), self.micro_batch_size, self.trainer.world_size, self.trainer.global_rank, self.seed)
        return DataLoader(data, batch_size=self.micro_batch_size, sampler=sampler, drop_last=True)


class Llama(pl.LightningModule):
    def __init__(self, strategy: str, folder: Path, lr: float) -> None:
        super().__init__()
        self.strategy_name, self.folder, self.lr = strategy, folder, lr
        self.model: torch.nn.Module | None = None

    def configure_model(self) -> None:
        if self.model is not None:
            return
        self.model = LlamaForCausalLM.from_pretrained(self.folder, dtype=torch.float32)
        self.model.train()
        if self.strategy_name == "fsdp":
            from torch.distributed.fsdp import fully_shard

            mesh = self.device_mesh["data_parallel"]
            for layer in self.model.model.layers:
                fully_shard(layer, mesh=mesh)
            fully_shard(self.model, mesh=mesh)

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        loss = self.model(input_ids=batch, labels=batch).loss
        self.last_loss = loss.detach()
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.model.parameters(), lr=self.lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0)


class StepTimes(pl.Callback):
    """Wall time per optimizer step (no gradient accumulation here: one batch is one step)."""

    def __init__(self) -> None:
        self.step_s: list[float] = []
        self.local_losses: list[float] = []
        self.losses: list[float] = []
        self._t0 = 0.0

    def on_train_start(self, trainer, pl_module) -> None:
        self._t0 = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        now = time.perf_counter()
        self.step_s.append(now - self._t0)
        self._t0 = now
        self.local_losses.append(float(pl_module.last_loss))

    def on_train_end(self, trainer, pl_module) -> None:  # one collective after training, none per step
        local = torch.tensor(self.local_losses, dtype=torch.float64, device=trainer.strategy.root_device)
        self.losses = trainer.strategy.all_gather(local).reshape(-1, len(self.local_losses)).mean(0).tolist()


def lightning_strategy(name: str, micro_batch_size: int):
    from lightning.pytorch.strategies import DDPStrategy, ModelParallelStrategy

    if name == "ddp":
        return DDPStrategy(process_group_backend="gloo")
    if name == "fsdp":
        return ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1)
    from shardlab.strategies.deepspeed_lightning import _LightningDeepSpeed

    stage = int(name[-1])
    config = {"zero_optimization": {"stage": stage}, "train_micro_batch_size_per_gpu": micro_batch_size,
              "zero_allow_untested_optimizer": True}
    if stage == 3:  # keep it referenced: from_pretrained loads into zero.Init's partitions while it lives
        from transformers.integrations import HfDeepSpeedConfig

        lightning_strategy.hf_ds_config = HfDeepSpeedConfig(config)
    return _LightningDeepSpeed(config=config, process_group_backend="gloo")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    import transformers

    transformers.utils.logging.disable_progress_bar()
    if args.strategy == "fsdp" and args.devices != 2:
        raise SystemExit("fsdp: data_parallel_size is fixed at 2 here; use --devices 2")
    pl.seed_everything(args.seed, verbose=False)
    blocks = token_blocks(args.model_folder, args.seq_len)
    strategy = lightning_strategy(args.strategy, args.micro_batch_size)
    recorder = StepTimes()
    trainer = pl.Trainer(accelerator="cpu", devices=args.devices, strategy=strategy, precision="32-true",
                         max_steps=args.steps, gradient_clip_val=args.grad_clip or None,
                         use_distributed_sampler=False, logger=False, enable_checkpointing=False,
                         enable_model_summary=False, callbacks=[recorder])
    t0 = time.perf_counter()
    trainer.fit(Llama(args.strategy, args.model_folder, args.lr),
                datamodule=Blocks(blocks, args.micro_batch_size, args.seed))
    wall = time.perf_counter() - t0
    if trainer.global_rank != 0:
        return
    warmup = min(5, len(recorder.step_s) // 2)
    median = statistics.median(recorder.step_s[warmup:])
    result = {
        "strategy": args.strategy, "lightning_strategy": type(strategy).__name__,
        "deepspeed_config": getattr(strategy, "config", None) if args.strategy.startswith("zero") else None,
        "world_size": trainer.world_size, "micro_batch_size": args.micro_batch_size, "seq_len": args.seq_len,
        "steps": args.steps, "warmup_steps": warmup, "median_step_s": median,
        "tokens_per_s": args.micro_batch_size * args.seq_len * trainer.world_size / median,
        "step_s": recorder.step_s, "losses": recorder.losses, "wall_s": wall, "model_folder": str(args.model_folder),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(f".{args.out.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(result, indent=2, default=str))
    os.replace(tmp, args.out)
    print(f"raw lightning {args.strategy}: loss {result['losses'][0]:.4f} -> {result['losses'][-1]:.4f}, "
          f"{result['tokens_per_s']:.0f} tokens/s, median step {median * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
