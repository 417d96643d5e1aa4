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


# Labels in the loss (recipes/loss.py, recipes/module.py): the targets' summed loss over the whole global batch's targets.
def _liger_on_cuda() -> bool:
    import importlib.util

    return torch.cuda.is_available() and importlib.util.find_spec("liger_kernel") is not None


@pytest.mark.parametrize("head", ["hf", "chunked", pytest.param("fused", marks=pytest.mark.skipif(
    not _liger_on_cuda(), reason="Liger's fused loss runs on CUDA with liger-kernel installed"))])
def test_labels_are_the_targets_of_the_loss_after_the_shift(head):
    from transformers import LlamaConfig, LlamaForCausalLM

    from shardlab.recipes import loss as loss_lib

    torch.manual_seed(0)
    device = "cuda" if head == "fused" else "cpu"
    model = LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                                         num_key_value_heads=2, vocab_size=97)).to(device)
    ids = torch.randint(0, 97, (3, 17), device=device)
    targets = torch.rand(3, 17, device=device) < 0.4
    labels = torch.where(targets, ids, torch.full_like(ids, -100))
    with torch.no_grad():  # position t's logits score token t + 1, where it is a target
        logp = torch.log_softmax(model(input_ids=ids).logits.float(), -1)
    want = -sum(logp[b, t, ids[b, t + 1]] for b in range(3) for t in range(16) if targets[b, t + 1]) / 7.5
    if head == "chunked":
        loss_lib.use_chunked_loss(model)
    elif head == "fused":
        loss_lib.use_fused_loss(model)
    divisor = torch.tensor(7.5, device=device)
    loss = loss_lib.causal_lm_loss(model, ids, labels, divisor)
    assert torch.allclose(loss, want, rtol=1e-5 if head != "fused" else 1e-4)
    none = loss_lib.causal_lm_loss(model, ids, torch.full_like(ids, -100), divisor)  # no targets: 0, not NaN
    none.backward()
    assert none.item() == 0 and all(p.grad is None or torch.isfinite(p.grad).all() for p in model.parameters())


def test_compile_builds_one_graph_for_all_the_decoder_layers():
    """--compile compiles every decoder layer, not the first 8: the training forward builds no key/value cache, whose
    per-layer slots made Dynamo recompile the shared layer code once per layer up to its recompile limit (8), and run
    llama-1b's other 14 layers uncompiled (recipes/loss.py)."""
    from torch._dynamo.utils import counters

    from shardlab.recipes.module import compile_layers

    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=10, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=97)  # use_cache=True, as every Llama config says
    model = LlamaForCausalLM(cfg).train()
    compile_layers(model)
    x = torch.randint(0, 97, (2, 16))
    for _ in range(2):
        loss_lib.causal_lm_loss(model, x).backward()
    assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])
    assert not counters["recompiles"], dict(counters["recompiles"])


@pytest.mark.skipif(not _liger_on_cuda(), reason="Liger's fused loss runs on CUDA with liger-kernel installed")
def test_compiled_layers_with_ligers_loss_keep_the_loss_and_gradients():
    """--compile --kernels liger: every decoder layer compiled with torch's norm, RoPE and SwiGLU (none of Liger's
    layer kernels patched in), the loss Liger's fused one: the same loss and gradients as the plain model (fp32)."""
    from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm

    from shardlab.recipes.kernels import use_liger
    from shardlab.recipes.module import compile_layers

    torch._dynamo.reset()
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=1000, tie_word_embeddings=True,
                      rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 64})
    ref = LlamaForCausalLM(cfg).cuda().train()
    fast = LlamaForCausalLM(cfg).cuda().train()
    fast.load_state_dict(ref.state_dict())
    use_liger(fast, layers=False)
    compile_layers(fast)
    layer = fast.model.layers[0]
    assert type(layer.input_layernorm) is LlamaRMSNorm and type(layer.mlp).forward is LlamaMLP.forward
    x = torch.randint(0, 1000, (2, 128), device="cuda")
    a, b = loss_lib.causal_lm_loss(ref, x), loss_lib.causal_lm_loss(fast, x)
    a.backward(), b.backward()
    assert rel_diff([b.item()], [a.item()]) < 1e-4
    for (name, p), q in zip(ref.named_parameters(), fast.parameters()):
        assert torch.allclose(p.grad, q.grad, rtol=1e-3, atol=1e-6), name
