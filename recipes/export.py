"""The consolidated Hugging Face export: gathered from any strategy, written under a temporary name,
reloaded and checked against the trained model's logits before it is renamed into place."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Optional

import lightning.pytorch as pl
import torch

from shardlab.core.errors import RunFailed
from shardlab.core.precision import half
from shardlab.recipes.weights import tie

# Max |logit difference| / max(1, max |logit|) allowed between the trained model and the reloaded export.
# fp32: both sides compute the same thing; 16-bit: the export holds the fp32 master weights while a
# DeepSpeed module computes with 16-bit copies of them, and matmuls round to bf16's 8-bit mantissa.
TOLERANCE = {"32-true": 1e-4, "bf16-mixed": 5e-2, "bf16-true": 5e-2, "16-mixed": 2e-2}
EXPORT_DTYPE = {"bf16-true": torch.bfloat16}


class ExportError(RunFailed):
    """The export did not reproduce the trained model: the run fails."""


def _logits(model: torch.nn.Module, batch: torch.Tensor, precision: str) -> torch.Tensor:
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, None: None}[half(precision)]
    with torch.no_grad(), torch.autocast(batch.device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
        return model(input_ids=batch, use_cache=False).logits.float()


def _for_shell(state: dict[str, torch.Tensor], config, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The state dict in `dtype` with every key a freshly built model expects. Under tied embeddings some
    backends list lm_head.weight and others do not (named_parameters lists a shared matrix once): it is the
    embedding matrix, and a copy that differs from it means the tie broke in training."""
    out = {k: v.to(dtype) for k, v in state.items()}
    if getattr(config, "tie_word_embeddings", False):
        lm_head, embed = out.get("lm_head.weight"), out["model.embed_tokens.weight"]
        if lm_head is not None and not lm_head.equal(embed):
            raise ExportError("hf export: lm_head.weight differs from model.embed_tokens.weight in a model with "
                              "tied embeddings: the tie did not survive training; the export is not written")
        out["lm_head.weight"] = embed
    return out


def _check_buffers(reloaded: torch.nn.Module, trained: dict[str, torch.Tensor]) -> None:
    """The reload's buffers (RoPE's frequencies: computed at load, never saved) are the trained model's, to within
    16-bit rounding. A random tiny model barely uses positions after a few steps, so its logits alone once passed the
    check with garbage frequencies (strategies/deepspeed_lightning.py model_sharded_context says how)."""
    for name, buffer in reloaded.named_buffers():
        mine = trained.get(name)
        if mine is not None and not torch.allclose(buffer.detach().to("cpu", torch.float32), mine, rtol=1e-2, atol=1e-6):
            raise ExportError(f"hf export: the reloaded model's {name} differs from the trained model's; "
                              f"the export is not written")


class HFExport(pl.Callback):
    """Collective part in on_train_end (every rank), files on rank 0 only."""

    def __init__(self, source_folder: str, output: Path, probe: torch.Tensor, precision: str, float8: bool = False) -> None:
        self.source_folder, self.final, self.probe, self.precision = source_folder, output / "hf", probe, precision
        self.float8 = float8  # --float8: the reloaded copy is checked with the same float8 linears (the folder is plain)
        self.max_abs_diff: Optional[float] = None
        self.rel_diff: Optional[float] = None

    def on_train_end(self, trainer: pl.Trainer, pl_module) -> None:
        model = pl_module.model
        state = pl_module.strategy.full_state_dict(model)
        probe = self.probe.to(pl_module.device)
        model.eval()
        trained = _logits(model, probe, self.precision)
        problem = None
        if trainer.global_rank == 0:
            buffers = {n: b.detach().to("cpu", torch.float32) for n, b in model.named_buffers()}
            try:
                self._write_and_verify(state, trained, buffers, pl_module.device)
            except ExportError as e:
                problem = str(e)
        problem = trainer.strategy.broadcast(problem, src=0)  # every rank fails together, none hangs
        if problem:
            raise ExportError(problem)

    def _write_and_verify(self, state: dict[str, torch.Tensor], trained: torch.Tensor, buffers: dict[str, torch.Tensor],
                          device: torch.device) -> None:
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

        dtype = EXPORT_DTYPE.get(self.precision, torch.float32)
        self.final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".hf.tmp-", dir=self.final.parent))
        try:
            config = AutoConfig.from_pretrained(self.source_folder)
            config.dtype = dtype
            with torch.device("meta"):
                shell = LlamaForCausalLM(config)
            shell.load_state_dict(_for_shell(state, config, dtype), assign=True, strict=True)
            tie(shell)  # assign=True gave embed_tokens a new tensor: lm_head shares it again
            shell.save_pretrained(tmp, safe_serialization=True)
            AutoTokenizer.from_pretrained(self.source_folder).save_pretrained(tmp)
            reloaded = AutoModelForCausalLM.from_pretrained(tmp, dtype=dtype).to(device).eval()
            _check_buffers(reloaded, buffers)
            if self.float8:  # the same arithmetic as the trained model's, so that the check sees the weights only
                from shardlab.recipes import float8
                float8.convert(reloaded)
            again = _logits(reloaded, self.probe.to(device), self.precision)
            self.max_abs_diff = float((again - trained).abs().max())
            self.rel_diff = self.max_abs_diff / max(1.0, float(trained.abs().max()))
            if not self.rel_diff <= TOLERANCE[self.precision]:
                raise ExportError(
                    f"hf export: reloaded logits differ from the trained model's by {self.max_abs_diff:.3g} "
                    f"(relative {self.rel_diff:.3g} > {TOLERANCE[self.precision]}); the export is not written"
                )
            if self.final.exists():
                shutil.rmtree(self.final)
            os.rename(tmp, self.final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
