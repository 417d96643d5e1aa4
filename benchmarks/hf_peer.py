"""The strongest peer on shardlab's work: the Hugging Face Trainer (Accelerate underneath), one GPU.

The same model shape as `recipe run --model M` (shardlab's own LlamaConfig for M, so the 3B shape has its tied
embeddings, 128k vocabulary and llama3 rope scaling), random weights, sequences of --seq-len random tokens,
bf16 autocast over fp32 master weights (`bf16=True`), AdamW with shardlab's defaults (betas 0.9/0.95, eps 1e-8,
no weight decay, gradient clipping at 1.0), no accumulation, a loss logged every step (the Trainer reads it with a host
sync at each logging step; --logging-steps N: every N steps). The Trainer's backends as its documentation configures them:
- fsdp2: `fsdp="full_shard auto_wrap"`, fsdp_version 2, LlamaDecoderLayer wrapped, reshard after forward, fused AdamW;
- zero3: DeepSpeed ZeRO-3 with overlap_comm, contiguous gradients and the Trainer's "auto" bucket sizes;
- zero3_offload: the same with the optimizer on the CPU (pinned), DeepSpeed's CPU Adam;
- plain: no sharding (one GPU), fused AdamW.
`--liger` sets `use_liger_kernel=True` (Liger's fused RMSNorm, SwiGLU, RoPE and linear+cross-entropy).

Timing: a CUDA event at every optimizer step's end, recorded without waiting (the clock adds no sync of its own); a
step's time is from the previous step's end to its own on the GPU's clock (data loading, logging and the optimizer
included, as shardlab's step_s), the median after --warmup steps.

Usage (GPU machine; torchrun gives DeepSpeed and FSDP their process group):
    torchrun --nproc_per_node 1 benchmarks/hf_peer.py --model llama-1b --mode fsdp2 --liger --micro-batch-size 8 \
        --steps 20 --warmup 5 [--activation-checkpointing] --out FILE.json
Writes FILE.json: tokens/s, MFU (shardlab's flops_per_token, unique parameters, 989 TFLOP/s), peak memory, losses.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch

PEAK_FLOPS = 989e12  # H200 dense bf16


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def deepspeed_config(offload: bool, ratio: float = 1.0) -> dict:
    """ratio < 1 (--offload-ratio): DeepSpeed's partial offload (offload_optimizer.ratio, ZeRO-3 only) keeps the first
    1 - ratio of the sub-groups' optimizer on the GPU; sub-groups of 1e7 elements, so that the share is what was asked
    (DeepSpeed's default of 1e9 makes two sub-groups of a 1B model, and a ratio of 0.1 would offload half)."""
    zero = {"stage": 3, "overlap_comm": True, "contiguous_gradients": True, "reduce_bucket_size": "auto",
            "stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto"}
    if offload:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
        if ratio < 1:
            zero["offload_optimizer"]["ratio"] = ratio
            zero["sub_group_size"] = 10**7
    return {"bf16": {"enabled": "auto"}, "zero_optimization": zero, "gradient_clipping": "auto",
            "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto"}


def trainer_arguments(a: argparse.Namespace, out_dir: str):
    from transformers import TrainingArguments

    kw = dict(output_dir=out_dir, per_device_train_batch_size=a.micro_batch_size, max_steps=a.warmup + a.steps,
              gradient_accumulation_steps=a.grad_accum,
              bf16=torch.cuda.is_available(), learning_rate=a.lr, adam_beta1=0.9, adam_beta2=0.95, adam_epsilon=1e-8, weight_decay=0.0,
              max_grad_norm=1.0, lr_scheduler_type="constant", logging_steps=a.logging_steps, report_to=[], save_strategy="no",
              dataloader_num_workers=2, disable_tqdm=True, use_liger_kernel=a.liger,
              gradient_checkpointing=a.activation_checkpointing)
    if a.mode.startswith("zero3"):
        kw["deepspeed"] = deepspeed_config(offload=a.mode == "zero3_offload", ratio=a.offload_ratio)
    else:
        kw["optim"] = "adamw_torch_fused"
    if a.mode == "fsdp2":
        kw.update(fsdp="full_shard auto_wrap", fsdp_config={
            "fsdp_version": 2, "reshard_after_forward": True, "transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"]})
    return TrainingArguments(**kw)


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, n: int, seq_len: int, vocab: int) -> None:
        self.ids = torch.randint(0, vocab, (n, seq_len), generator=torch.Generator().manual_seed(1))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama-1b", help="a shardlab shipped model name (its shape)")
    ap.add_argument("--mode", required=True, choices=["fsdp2", "zero3", "zero3_offload", "plain"])
    ap.add_argument("--liger", action="store_true")
    ap.add_argument("--micro-batch-size", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=20, help="timed optimizer steps")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    ap.add_argument("--activation-checkpointing", action="store_true")
    ap.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step")
    ap.add_argument("--offload-ratio", type=float, default=1.0,
                    help="zero3_offload: the share of the optimizer on the CPU (DeepSpeed's offload_optimizer.ratio)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--logging-steps", type=int, default=1, help="the Trainer logs (and syncs for) the loss every N steps")
    ap.add_argument("--profile", help="write a profile of optimizer steps 6..8 here (recipes/profile.py's summary)")
    ap.add_argument("--memory-snapshot", help="write the allocator's history from the start of training to the end of "
                    "step 2 here (a pickle, as SHARDLAB_MEMORY_SNAPSHOT writes: benchmarks/memory_snapshot.py reads it)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    from transformers import LlamaForCausalLM, Trainer, TrainerCallback

    from shardlab.recipes.model import flops_per_token, model_config
    from shardlab.recipes.metrics import dump_allocations, peak_requested_bytes, record_allocations

    cfg = model_config(a.model)
    cfg.max_position_embeddings = max(cfg.max_position_embeddings, a.seq_len)

    class Clock(TrainerCallback):
        def __init__(self) -> None:
            self.ends: list = []  # CUDA events on a GPU, perf_counter() otherwise
            self.losses: list[float] = []

        def mark(self) -> None:
            if torch.cuda.is_available():
                event = torch.cuda.Event(enable_timing=True)
                event.record()
                self.ends.append(event)
            else:
                self.ends.append(time.perf_counter())

        def step_s(self) -> list[float]:
            sync()
            if torch.cuda.is_available():
                return [e.elapsed_time(b) / 1e3 for e, b in zip(self.ends, self.ends[1:])]
            return [b - e for e, b in zip(self.ends, self.ends[1:])]

        def on_train_begin(self, args, state, control, **kw):
            sync()
            self.mark()

        def on_step_end(self, args, state, control, **kw):
            self.mark()

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "loss" in logs:
                self.losses.append(float(logs["loss"]))

    class Profile(TrainerCallback):
        def __init__(self, path: str) -> None:
            from shardlab.recipes.profile import StepWindow

            self.window = StepWindow(path)

        def on_step_begin(self, args, state, control, **kw):
            if int(os.environ.get("RANK", 0)) == 0:
                self.window.step_begin(state.global_step)

        def on_step_end(self, args, state, control, **kw):
            if int(os.environ.get("RANK", 0)) == 0:
                self.window.step_end(state.global_step)

        def on_train_end(self, args, state, control, **kw):
            if int(os.environ.get("RANK", 0)) == 0:
                self.window.finish(state.global_step)

    class Snapshot(TrainerCallback):  # recipes/metrics.py MemorySnapshot's, for the Trainer
        def __init__(self, path: str) -> None:
            self.path, self.baseline, self.done = path, 0, False

        def on_train_begin(self, args, state, control, **kw):
            self.baseline = record_allocations()

        def on_step_end(self, args, state, control, **kw):
            if not self.done and state.global_step >= 2:
                dump_allocations(self.path, self.baseline)
                self.done = True

    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    clock = Clock()
    args = trainer_arguments(a, f"/tmp/hf-peer-{os.getpid()}")
    data = RandomTokens(a.micro_batch_size * a.grad_accum * (a.warmup + a.steps), a.seq_len, cfg.vocab_size)
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[clock] + ([Profile(a.profile)] if a.profile else [])
                      + ([Snapshot(a.memory_snapshot)] if a.memory_snapshot and torch.cuda.is_available() else []))
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t0
    if int(os.environ.get("RANK", 0)) != 0:
        return
    step_s = clock.step_s()
    median = statistics.median(step_s[a.warmup:])
    tokens_per_s = a.micro_batch_size * a.grad_accum * a.seq_len / median
    versions = {}
    for pkg in ("torch", "transformers", "accelerate", "deepspeed", "liger_kernel"):
        try:
            versions[pkg] = __import__(pkg).__version__
        except Exception:  # noqa: BLE001 - not installed, or no __version__
            versions[pkg] = None
    result = {"system": "hf-trainer", "mode": a.mode + ("_liger" if a.liger else ""), "model": a.model,
              "micro_batch_size": a.micro_batch_size, "grad_accum": a.grad_accum, "seq_len": a.seq_len,
              "activation_checkpointing": a.activation_checkpointing, "tokens_per_s": round(tokens_per_s),
              "mfu": tokens_per_s * flops_per_token(cfg, a.seq_len) / PEAK_FLOPS,
              "peak_memory_bytes": int(torch.cuda.max_memory_allocated()) if torch.cuda.is_available() else None,
              "peak_requested_bytes": peak_requested_bytes(torch.device("cuda")) if torch.cuda.is_available() else None,
              "median_step_s": median,
              "step_s": [round(s, 4) for s in step_s], "losses": [round(x, 4) for x in clock.losses[:4]],
              "wall_s": round(wall, 1), "versions": versions, "trainer_args": {
                  k: v for k, v in args.to_dict().items() if k in (
                      "per_device_train_batch_size", "gradient_accumulation_steps", "bf16", "optim", "fsdp", "fsdp_config", "deepspeed", "max_grad_norm",
                      "use_liger_kernel", "gradient_checkpointing", "dataloader_num_workers", "adam_beta2", "logging_steps")}}
    Path(a.out).write_text(json.dumps(result, indent=1))
    print(json.dumps({k: result[k] for k in ("mode", "model", "tokens_per_s", "mfu", "peak_memory_bytes")}))


if __name__ == "__main__":
    main()
