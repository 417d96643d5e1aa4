"""Raw Lightning on one GPU: the recipe's training step under Lightning's own strategies, without shardlab.

The baseline issue 7 judged shardlab against ("every preset 1.3-1.8x faster than raw Lightning"):
TinyLlama's shape (llama-1b: 22 layers, hidden 2048, 32k vocabulary), random weights, seq SEQ, micro-batch MB,
bf16-mixed, AdamW (fused; DeepSpeed's CPU Adam under offload), random tokens, no accumulation, no clipping.
Strategies as a user would write them from Lightning's documentation:
    ddp            DDPStrategy()
    fsdp           FSDPStrategy(auto_wrap_policy={LlamaDecoderLayer})   (FSDP1)
    zero2 / zero3  DeepSpeedStrategy(stage=2 / 3)
    zero3_offload  DeepSpeedStrategy(stage=3, offload_optimizer=True)
Timing: a CUDA sync at each batch's start and end; the median of the STEPS steps after 5 warm-up steps.
No shardlab code is imported. Usage: MB=8 SEQ=2048 STEPS=20 python3 benchmarks/raw_anchor.py STRATEGY
Prints one JSON line: strategy, median_step_s, tokens_per_s, mfu_vs_989, peak_mem_gib, losses, wall_s.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time

import lightning as L
import torch
from lightning.pytorch.strategies import DDPStrategy, DeepSpeedStrategy, FSDPStrategy
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama.modeling_llama import LlamaDecoderLayer

WARMUP = 5
PEAK_FLOPS = 989e12  # H200, dense bf16
SHAPE = dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
             num_key_value_heads=4, vocab_size=32000)  # TinyLlama-1.1B's published config

STRATEGIES = {
    "ddp": lambda: DDPStrategy(),
    "fsdp": lambda: FSDPStrategy(auto_wrap_policy={LlamaDecoderLayer}),
    "zero2": lambda: DeepSpeedStrategy(stage=2),
    "zero3": lambda: DeepSpeedStrategy(stage=3),
    "zero3_offload": lambda: DeepSpeedStrategy(stage=3, offload_optimizer=True),
}


class StepTimer(L.Callback):
    def __init__(self) -> None:
        self.seconds: list[float] = []
        self.losses: list[float] = []
        self._start = 0.0

    def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
        torch.cuda.synchronize()
        self._start = time.perf_counter()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        torch.cuda.synchronize()
        self.seconds.append(time.perf_counter() - self._start)
        self.losses.append(float(outputs["loss"]))


class CausalLM(L.LightningModule):
    def __init__(self, config: LlamaConfig, cpu_adam: bool) -> None:
        super().__init__()
        self.config, self.cpu_adam, self.model = config, cpu_adam, None

    def configure_model(self) -> None:  # under the strategy's context (DeepSpeed's zero.Init for stage 3)
        if self.model is None:
            torch.manual_seed(0)
            self.model = LlamaForCausalLM(self.config)

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        return self.model(input_ids=batch, labels=batch).loss

    def configure_optimizers(self):
        if self.cpu_adam:
            from deepspeed.ops.adam import DeepSpeedCPUAdam

            return DeepSpeedCPUAdam(self.parameters(), lr=1e-4)
        return torch.optim.AdamW(self.parameters(), lr=1e-4, fused=True)


def unique_parameters(c: LlamaConfig) -> int:
    h, i, layers, v = c.hidden_size, c.intermediate_size, c.num_hidden_layers, c.vocab_size
    kv = c.num_key_value_heads * (h // c.num_attention_heads)
    return layers * (2 * h * h + 2 * h * kv + 3 * h * i + 2 * h) + 2 * v * h + h


def main() -> None:
    name = sys.argv[1]
    seq, mb, steps = (int(os.environ.get(k, d)) for k, d in (("SEQ", 2048), ("MB", 8), ("STEPS", 20)))
    config = LlamaConfig(max_position_embeddings=seq, **SHAPE)
    tokens = torch.randint(0, config.vocab_size, (mb * (steps + WARMUP), seq), generator=torch.Generator().manual_seed(1))
    timer = StepTimer()
    trainer = L.Trainer(accelerator="gpu", devices=1, strategy=STRATEGIES[name](), precision="bf16-mixed",
                        max_steps=steps + WARMUP, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[timer])
    t0 = time.perf_counter()
    trainer.fit(CausalLM(config, cpu_adam="offload" in name), torch.utils.data.DataLoader(list(tokens), batch_size=mb))
    wall = time.perf_counter() - t0
    step = statistics.median(timer.seconds[WARMUP:])
    tokens_per_s = mb * seq / step
    # 6N + 12·L·d·S training FLOPs per token (PaLM appendix B, nanoGPT's estimate_mfu)
    flops = 6 * unique_parameters(config) + 12 * config.num_hidden_layers * config.hidden_size * seq
    print(json.dumps({"strategy": name, "median_step_s": round(step, 4), "tokens_per_s": round(tokens_per_s),
                      "mfu_vs_989": round(tokens_per_s * flops / PEAK_FLOPS, 4),
                      "peak_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
                      "losses": [round(x, 4) for x in timer.losses[:4]], "wall_s": round(wall, 1)}))


if __name__ == "__main__":
    main()
