"""`--fused-adds` (recipes/fused_adds.py) trains the same model: the same loss and gradients as the plain layers."""
from __future__ import annotations

import copy
import importlib.util

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from shardlab.core.errors import UserError
from shardlab.recipes import fused_adds
from shardlab.recipes.loss import causal_lm_loss

# Llama 3's features: tied embeddings, grouped KV heads, rope_scaling of type llama3
LLAMA3 = dict(hidden_size=64, intermediate_size=160, num_hidden_layers=3, num_attention_heads=8, num_key_value_heads=2,
              vocab_size=211, tie_word_embeddings=True, max_position_embeddings=256, rope_theta=500000.0,
              rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 64})


def _pair(**extra):
    torch.manual_seed(0)
    ref = LlamaForCausalLM(LlamaConfig(**{**LLAMA3, **extra}))
    fused = copy.deepcopy(ref)
    return ref, fused


def _grads(model, batch, checkpointing=False):
    model.train()
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    loss = causal_lm_loss(model, batch)
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in model.named_parameters()}


@pytest.mark.parametrize("checkpointing", [False, True])
def test_fused_adds_keep_the_loss_and_every_gradient(checkpointing):
    ref, fused = _pair()
    assert fused_adds.use(fused, liger=False) == 3
    batch = torch.randint(0, 211, (2, 37))
    (a, ga), (b, gb) = _grads(ref, batch, checkpointing), _grads(fused, batch, checkpointing)
    assert torch.allclose(a, b, rtol=1e-6), (a, b)
    assert ga.keys() == gb.keys()  # the same parameters, by the same names (checkpoints and exports unchanged)
    for name in ga:
        assert torch.allclose(ga[name], gb[name], rtol=1e-5, atol=1e-7), name
    # outside training too: generation and evaluation see the same logits
    with torch.no_grad():
        assert torch.allclose(ref(input_ids=batch).logits, fused(input_ids=batch).logits, atol=1e-5)


def test_the_summing_path_is_the_one_taken_and_nothing_is_left_behind(monkeypatch):
    """Each projection that reads its group's tensor sums into it (the counters say so), no group outlives the layer's
    call, and a step's backward hands every _Sum's buffer on."""
    ref, fused = _pair()
    fused_adds.use(fused, liger=False)
    calls = {"summed": 0, "residual": 0}
    summed, residual = fused_adds._SummedInputLinear.apply, fused_adds._LinearPlusResidual.apply
    sums = []

    def count_summed(x, w, total):
        calls["summed"] += 1
        sums.append(total)
        return summed(x, w, total)

    def count_residual(*args):
        calls["residual"] += 1
        return residual(*args)

    monkeypatch.setattr(fused_adds._SummedInputLinear, "apply", count_summed)
    monkeypatch.setattr(fused_adds._LinearPlusResidual, "apply", count_residual)
    _grads(fused, torch.randint(0, 211, (2, 17)))
    assert calls == {"summed": 5 * 3, "residual": 3}
    assert all(t.pending == 0 and t.grad is None for t in sums)
    assert all(getattr(m, "_shardlab_group", None) is None for m in fused.modules())


def test_fused_adds_refuse_projections_with_biases():
    _, fused = _pair(attention_bias=True)
    with pytest.raises(UserError, match="--fused-adds: .*biases.*--no-fused-adds"):
        fused_adds.use(fused, liger=False)


@pytest.mark.skipif(not (torch.cuda.is_available() and importlib.util.find_spec("liger_kernel")),
                    reason="Liger's fused add + RMSNorm runs on CUDA with liger-kernel installed")
def test_fused_adds_with_ligers_kernels_keep_the_loss_and_gradients():
    """On a GPU in fp32: Liger's layers with and without the lever (Liger's fused add + RMSNorm in the attention's
    residual add, the GEMMs' sums), the same loss and gradients to rounding."""
    from shardlab.recipes.kernels import use_liger

    ref, fused = _pair()
    ref, fused = ref.cuda(), fused.cuda()
    use_liger(ref), use_liger(fused)
    fused_adds.use(fused, liger=True)
    batch = torch.randint(0, 211, (2, 37), device="cuda")
    (a, ga), (b, gb) = _grads(ref, batch), _grads(fused, batch)
    assert torch.allclose(a, b, rtol=1e-5), (a, b)
    for name in ga:
        assert torch.allclose(ga[name], gb[name], rtol=1e-4, atol=1e-6), name


@pytest.mark.parametrize("strategy", ["fsdp", "zero3"])
def test_fused_adds_train_the_same_model_under_the_backends_hooks(train, tmp_path, strategy):
    """The Llama 3 shape on 2 CPU ranks under FSDP2 (its unshard around each layer) and ZeRO-3 (its fetch around each
    projection): the losses (validation's too) of the run without the lever, every layer's two sums handed on."""
    from tests.conftest import LLAMA3 as FLAGS, rel_diff

    trace = tmp_path / "trace.txt"
    fused = train(strategy, *FLAGS, "--fused-adds", env={"SHARDLAB_TRACE": str(trace)})
    plain = train(strategy, *FLAGS)  # test_parity's run
    assert fused["config"]["fused_adds"] is True and plain["config"]["fused_adds"] is False
    assert rel_diff(fused["losses"], plain["losses"]) < 1e-5, (fused["losses"], plain["losses"])
    assert rel_diff([v["loss"] for v in fused["val_losses"]], [v["loss"] for v in plain["val_losses"]]) < 1e-5
    sums = trace.read_text().split().count("fused-adds-sum")
    assert sums == 2 * len(fused["losses"]) * 2 * 2  # ranks x steps x layers x (q/k/v, gate/up)


def test_the_gpu_default_is_on_where_it_was_measured(monkeypatch):
    """fsdp and zero3 with Liger's kernels (one H100, results/2026-12-06i-fused-adds.md) fold the adds unless told not
    to; the other presets, CPU runs, torch's kernels and compiled layers do not."""
    from shardlab.core.config import RunConfig
    from shardlab.recipes import kernels
    from shardlab.recipes.resolve import resolve_run

    monkeypatch.setattr(kernels, "default", lambda accelerator, installed=None: "liger" if accelerator == "gpu" else "torch")
    monkeypatch.setattr(kernels, "check", lambda accelerator: None)  # as on a GPU machine with liger-kernel
    gpu = dict(model="llama-1b", accelerator="gpu", gpus=1, gpu_memory_gib=80, cpu_memory_gib=512)
    cases = {("fsdp",): True, ("zero3",): True, ("ddp",): False, ("zero2",): False, ("zero3_offload",): False,
             ("fsdp", "no"): False, ("fsdp", "torch"): False, ("fsdp", "compile"): False, ("zero2", "yes"): True}
    for (strategy, *how), expected in cases.items():
        extra = {"no": {"fused_adds": False}, "yes": {"fused_adds": True}, "torch": {"kernels": "torch"},
                 "compile": {"compile": True}}[how[0]] if how else {}
        run = resolve_run(RunConfig(strategy=strategy, **gpu, **extra), for_run=False)
        assert run.config.fused_adds is expected, (strategy, how)
        assert run.context().fused_adds is expected
    assert resolve_run(RunConfig(strategy="fsdp", model="tiny"), for_run=False).config.fused_adds is False  # CPU
    with pytest.raises(UserError, match="--fused-adds: fsdp compiles its GPU runs by default"):
        resolve_run(RunConfig(strategy="fsdp", kernels="torch", fused_adds=True, **gpu), for_run=False)
