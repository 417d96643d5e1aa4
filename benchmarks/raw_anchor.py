"""Raw-Lightning anchor: the same Llama step under each Lightning strategy on one GPU.

Copied unchanged from the team's shared/gpu/anchor.py (the baseline issue 7 judges shardlab against),
so that benchmarks/gpu_strategies.py can run it in the same call. No shardlab code is imported here.
Usage: python benchmarks/raw_anchor.py STRATEGY  (ddp | fsdp | zero2 | zero3 | zero3_offload); env MB, SEQ, STEPS
Prints one JSON line: tokens/s, MFU, peak memory, first losses.
"""
import json, os, sys, time
import torch
import lightning as L
from lightning.pytorch.strategies import DDPStrategy, DeepSpeedStrategy, FSDPStrategy
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama.modeling_llama import LlamaDecoderLayer

name = sys.argv[1]
SEQ = int(os.environ.get("SEQ", 2048)); MB = int(os.environ.get("MB", 8))
STEPS = int(os.environ.get("STEPS", 20)); WARM = 5
cfg = LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
                  num_key_value_heads=4, vocab_size=32000, max_position_embeddings=SEQ)

class Rec(L.Callback):
    def __init__(self): self.t = []; self.losses = []
    def on_train_batch_start(self, tr, pl, b, i):
        torch.cuda.synchronize(); self.t0 = time.perf_counter()
    def on_train_batch_end(self, tr, pl, out, b, i):
        torch.cuda.synchronize(); self.t.append(time.perf_counter() - self.t0)
        self.losses.append(float(out["loss"]))

class M(L.LightningModule):
    def __init__(self):
        super().__init__(); self.model = None
    def configure_model(self):
        if self.model is None:
            torch.manual_seed(0); self.model = LlamaForCausalLM(cfg)
    def training_step(self, batch, i):
        return self.model(input_ids=batch, labels=batch).loss
    def configure_optimizers(self):
        if "offload" in name:
            from deepspeed.ops.adam import DeepSpeedCPUAdam
            return DeepSpeedCPUAdam(self.parameters(), lr=1e-4)
        return torch.optim.AdamW(self.parameters(), lr=1e-4, fused=True)

strategies = {
    "ddp": lambda: DDPStrategy(),
    "fsdp": lambda: FSDPStrategy(auto_wrap_policy={LlamaDecoderLayer}),
    "zero2": lambda: DeepSpeedStrategy(stage=2),
    "zero3": lambda: DeepSpeedStrategy(stage=3),
    "zero3_offload": lambda: DeepSpeedStrategy(stage=3, offload_optimizer=True),
}
g = torch.Generator().manual_seed(1)
data = [torch.randint(0, cfg.vocab_size, (SEQ,), generator=g) for _ in range(MB * (STEPS + WARM))]
loader = torch.utils.data.DataLoader(data, batch_size=MB)
rec = Rec()
tr = L.Trainer(accelerator="gpu", devices=1, strategy=strategies[name](), precision="bf16-mixed",
               max_steps=STEPS + WARM, logger=False, enable_checkpointing=False, enable_progress_bar=False,
               enable_model_summary=False, callbacks=[rec])
t0 = time.perf_counter(); tr.fit(M(), loader); wall = time.perf_counter() - t0
n = sum(p.numel() for p in LlamaForCausalLM(cfg).parameters()) if False else 1_100_048_384
step = sorted(rec.t[WARM:])[len(rec.t[WARM:]) // 2]
tps = MB * SEQ / step
flops_tok = 6 * n + 12 * cfg.num_hidden_layers * cfg.hidden_size * SEQ
print(json.dumps({"strategy": name, "median_step_s": round(step, 4), "tokens_per_s": round(tps),
                  "mfu_vs_989": round(tps * flops_tok / 989e12, 4),
                  "peak_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
                  "losses": [round(x, 4) for x in rec.losses[:4]], "wall_s": round(wall, 1)}))
