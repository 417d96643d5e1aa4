"""The export check (recipes/export.py) compares more than logits: the reload's buffers are the trained model's."""
from __future__ import annotations

import pytest
import torch


def test_a_reload_with_other_rope_frequencies_is_refused(cache_dir, monkeypatch):
    """A random tiny model barely uses positions after a few steps: its logits passed the check with garbage RoPE
    frequencies once (zero3 with --float8). The buffers are compared on their own."""
    monkeypatch.setenv("SHARDLAB_CACHE", str(cache_dir))
    from transformers import AutoModelForCausalLM

    from shardlab.recipes import model as model_lib
    from shardlab.recipes.export import ExportError, _check_buffers

    model = AutoModelForCausalLM.from_pretrained(model_lib.initial_folder("tiny-llama3", 0), dtype=torch.float32)
    trained = {n: b.detach().float().clone() for n, b in model.named_buffers()}
    assert "model.rotary_emb.inv_freq" in trained
    _check_buffers(model, {n: b.to(torch.bfloat16).float() for n, b in trained.items()})  # 16-bit rounding passes
    model.model.rotary_emb.inv_freq.mul_(1.5)
    with pytest.raises(ExportError, match=r"the reloaded model's model\.rotary_emb\.inv_freq differs"):
        _check_buffers(model, trained)
