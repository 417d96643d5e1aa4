"""The speed levers (`--compile`, `--chunked-loss`) train the same model: same losses as without them."""
from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from shardlab.recipes import loss as loss_lib
from tests.conftest import rel_diff


@pytest.mark.parametrize("chunk", [7, 64, 10_000])  # chunks that split rows unevenly, and one chunk
def test_chunked_loss_equals_hf_loss_and_gradients(monkeypatch, chunk):
    monkeypatch.setattr(loss_lib, "CHUNK_TOKENS", chunk)
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=97)
    ref, chunked = LlamaForCausalLM(cfg), LlamaForCausalLM(cfg)
    chunked.load_state_dict(ref.state_dict())
    loss_lib.use_chunked_loss(chunked)
    batch = torch.randint(0, 97, (3, 41))
    a, b = loss_lib.causal_lm_loss(ref, batch), loss_lib.causal_lm_loss(chunked, batch)
    a.backward(), b.backward()
    assert torch.allclose(a, b, rtol=1e-6)
    for (name, p), q in zip(ref.named_parameters(), chunked.parameters()):
        assert torch.allclose(p.grad, q.grad, rtol=1e-5, atol=1e-7), name
    # outside training the head is the plain projection: exports and generation see logits
    assert torch.allclose(chunked(input_ids=batch).logits, ref(input_ids=batch).logits)
    assert set(dict(chunked.named_parameters())) == set(dict(ref.named_parameters()))


def test_compile_and_chunked_loss_keep_fsdp_losses(train):
    # 4 x 2048 tokens per rank: two loss chunks; every decoder layer compiled (inductor on CPU)
    shape = ("--seq-len", "2048", "--max-steps", "3", "--no-export", "--metrics", "none")
    plain = train("fsdp", *shape)
    fast = train("fsdp", *shape, "--compile", "--chunked-loss")
    assert rel_diff(fast["losses"], plain["losses"]) < 1e-5
    assert fast["memory_estimate"]["parts"]["logits"] < plain["memory_estimate"]["parts"]["logits"] / 1.9
