"""Kernel-level speed levers for the llama-1b shape in a plain PyTorch loop (no Lightning), one GPU.

It answers "would this lever move the ceiling?" before the lever is wired into the recipe: the same
model as `../shared/gpu/limit.py` (1.1B parameters, seq 2048, bf16 autocast, fused AdamW, the same
batch every step), with one lever changed per run. Prints one JSON line per run.

    python3 benchmarks/gpu_levers.py --compile model                      # limit.py's "compile"
    python3 benchmarks/gpu_levers.py --compile model --attention cudnn    # SDPA through cuDNN
    python3 benchmarks/gpu_levers.py --liger --compile none               # Liger's Triton kernels
    python3 benchmarks/gpu_levers.py --compile model --mode max-autotune-no-cudagraphs

MFU counts 6N + 12*L*d*S FLOPs per token against 989 TFLOP/s (dense bf16, H100/H200 SXM).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import time

import torch

PEAK = 989e12


def build(args):
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
                      num_key_value_heads=4, vocab_size=32000, max_position_embeddings=args.seq_len)
    if args.liger:
        from liger_kernel.transformers import apply_liger_kernel_to_llama
        apply_liger_kernel_to_llama(rope=True, rms_norm=True, swiglu=True, fused_linear_cross_entropy=True)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg)
    return cfg, model


def attention_context(name: str):
    if name == "default":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backend = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
               "efficient": SDPBackend.EFFICIENT_ATTENTION}[name]
    return sdpa_kernel([backend])


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--compile", choices=["none", "model", "layers"], default="model")
    p.add_argument("--mode", default=None, help="torch.compile mode (e.g. max-autotune-no-cudagraphs)")
    p.add_argument("--attention", choices=["default", "cudnn", "flash", "efficient"], default="default")
    p.add_argument("--liger", action="store_true", help="Liger RMSNorm, RoPE, SwiGLU, fused linear cross-entropy")
    p.add_argument("--micro-batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=2048)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=6)
    p.add_argument("--tag", default="")
    args = p.parse_args(argv)

    cfg, model = build(args)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    if args.compile == "model":
        step_model = torch.compile(model, mode=args.mode)
    else:
        step_model = model
        if args.compile == "layers":
            for layer in model.model.layers:
                layer.forward = torch.compile(layer.forward, mode=args.mode)
    n = sum(q.numel() for q in model.parameters())
    x = torch.randint(0, cfg.vocab_size, (args.micro_batch_size, args.seq_len), device="cuda")
    times, t_start = [], time.perf_counter()
    with attention_context(args.attention):
        for _ in range(args.warmup + args.steps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = step_model(input_ids=x, labels=x).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
    step = sorted(times[args.warmup:])[args.steps // 2]
    tps = args.micro_batch_size * args.seq_len / step
    flops = 6 * n + 12 * cfg.num_hidden_layers * cfg.hidden_size * args.seq_len
    print(json.dumps({"tag": args.tag, "compile": args.compile, "mode": args.mode, "attention": args.attention,
                      "liger": args.liger, "micro_batch_size": args.micro_batch_size, "params": n,
                      "tokens_per_s": round(tps), "mfu": round(tps * flops / PEAK, 4),
                      "step_s": round(step, 4), "warmup_s": round(sum(times[:args.warmup]), 1),
                      "total_s": round(time.perf_counter() - t_start, 1),
                      "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 1),
                      "loss": round(float(loss), 3)}), flush=True)


if __name__ == "__main__":
    main()
