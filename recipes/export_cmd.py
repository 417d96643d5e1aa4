"""`recipe export CHECKPOINT --output DIR`: a consolidated Hugging Face folder from a checkpoint of any strategy
and world size, on this machine's CPU, without the ranks that wrote it (DeepSpeed's zero_to_fp32, for every backend).

It reads the checkpoint's portable copy (recipes/portable.py) one tensor at a time: the fp32 master weights only,
never the optimizer's moments, written in safetensors files of about 2 GiB (portable.ShardWriter). Like the end-of-run export
(recipes/export.py) the folder is written under a temporary name, reloaded with from_pretrained and its logits
checked against the checkpoint's weights on a fixed probe, then renamed into place; the probe's reference model
is built from the portable copy (one model in memory, plus the reloaded one).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path

import torch

from shardlab.core.errors import UserError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="OUTPUT/checkpoints/step-NNNNNN (or OUTPUT/checkpoints: its newest intact one)")
    parser.add_argument("--output", required=True, help="the Hugging Face folder to write (must not exist or be empty)")


def main(args: argparse.Namespace) -> int:
    from shardlab.recipes import checkpoint
    from shardlab.recipes.portable import Reader

    path, warning = checkpoint.resolve_resume(args.checkpoint, Path(args.checkpoint), flag="recipe export")
    if warning:
        print(f"recipe: warning: {warning}")
    portable = path / "portable"
    if not (portable / "index.json").is_file():
        raise UserError(f"{path}: has no portable copy (written with --no-portable-checkpoints or by an older "
                        f"shardlab); resume it under its own strategy to the end of the run, whose hf/ export is the same")
    out = Path(args.output)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"--output {out}: exists and is not an empty folder; give a new folder")
    if not out.parent.is_dir():
        raise UserError(f"--output {out}: folder {out.parent} does not exist")
    meta = json.loads((path / "meta.json").read_text())
    reader = Reader(portable)
    written, rel = _write_and_verify(reader, portable / "hf-config", out, meta["precision"])
    print(f"recipe: exported step {meta['step']} of {meta['strategy']} on {meta['world_size']} rank(s) to {out} "
          f"({written} tensors; reloaded logits within {rel:.2g} relative)")
    return 0


def _write_and_verify(reader, hf_config: Path, final: Path, precision: str) -> tuple[int, float]:
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM, LlamaForCausalLM
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    from shardlab.recipes.export import EXPORT_DTYPE, TOLERANCE, ExportError, _logits
    from shardlab.recipes.portable import ShardWriter
    from shardlab.recipes.weights import tie

    transformers.utils.logging.disable_progress_bar()  # the reload's per-tensor bar: nothing to act on

    dtype = EXPORT_DTYPE.get(precision, torch.float32)
    tmp = Path(tempfile.mkdtemp(prefix=".hf.tmp-", dir=final.parent))
    try:
        writer = ShardWriter(tmp, "model")
        for name in reader.names:  # one tensor at a time; a tied lm_head is the embedding (named once)
            writer.add(name, reader.read("master", name).to(dtype))
        weight_map = writer.close()
        (tmp / "model.safetensors.index.json").write_text(json.dumps(
            {"metadata": {"total_size": writer.total}, "weight_map": weight_map}, indent=1))
        for f in hf_config.iterdir():
            shutil.copy(f, tmp / f.name)
        config = AutoConfig.from_pretrained(tmp)
        config.dtype = dtype
        config.save_pretrained(tmp)

        # the check: the reloaded folder's logits against the checkpoint's own weights (fp32) on a fixed probe
        probe = torch.randint(0, config.vocab_size, (2, 32), generator=torch.Generator().manual_seed(0))
        with torch.device("meta"):
            reference = LlamaForCausalLM(config)
        state = {n: reader.read("master", n).to(dtype) for n in reader.names}
        if getattr(config, "tie_word_embeddings", False):
            state["lm_head.weight"] = state["model.embed_tokens.weight"]
        reference.load_state_dict(state, assign=True, strict=True)
        tie(reference)
        reference.model.rotary_emb = LlamaRotaryEmbedding(config=config)  # a buffer, not in the checkpoint
        del state
        want = _logits(reference.eval(), probe, precision)
        del reference
        reloaded = AutoModelForCausalLM.from_pretrained(tmp, dtype=dtype).eval()
        got = _logits(reloaded, probe, precision)
        rel = float((got - want).abs().max()) / max(1.0, float(want.abs().max()))
        if not rel <= TOLERANCE[precision]:
            raise ExportError(f"export: reloaded logits differ from the checkpoint's by {rel:.3g} relative "
                              f"(> {TOLERANCE[precision]}); nothing written to {final}")
        if final.exists():
            final.rmdir()  # empty (checked)
        os.rename(tmp, final)
        return len(weight_map), rel
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
