"""The four families train the same model to the same losses (fp32, 2 CPU ranks), offload presets too."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from tests.conftest import rel_diff

STEPS = ("--max-steps", "6")


@pytest.mark.parametrize("strategy", ["zero2", "zero3", "fsdp"])
def test_fp32_losses_match_ddp(train, strategy):
    ddp, other = train("ddp", *STEPS), train(strategy, *STEPS)
    assert len(other["losses"]) == 6 and other["world_size"] == 2
    assert rel_diff(other["losses"], ddp["losses"]) < 1e-5
    assert other["losses"][-1] < other["losses"][0]  # it trains


@pytest.mark.parametrize("strategy", ["zero2_offload", "zero3_offload", "zero3_offload_all", "fsdp_offload"])
def test_offload_presets_match_ddp(train, strategy):
    assert rel_diff(train(strategy, *STEPS)["losses"], train("ddp", *STEPS)["losses"]) < 1e-5


@pytest.mark.parametrize("strategy", ["zero3", "fsdp"])
def test_grad_accum_with_clipping_matches_ddp(train, strategy):
    # Lightning and DeepSpeed both divide the loss by the accumulation steps; shardlab scales once.
    # 11 micro-batches per rank per epoch, 4 per step: step 3 starts the second epoch. Lightning would step
    # DDP/FSDP on the epoch's last batch (3 micro-batches) and carry them into DeepSpeed's next step (7):
    # shardlab drops an epoch's tail that is not a whole step, so every step has 4 under every strategy.
    flags = ("--max-steps", "3", "--grad-accum", "4", "--micro-batch-size", "32", "--seq-len", "256", "--grad-clip", "1.0")
    assert rel_diff(train(strategy, *flags)["losses"], train("ddp", *flags)["losses"]) < 1e-5


@pytest.mark.parametrize("strategy", ["ddp", "zero2", "zero3", "fsdp"])
def test_bf16_mixed_is_finite_and_close(train, strategy):
    s = train(strategy, "--max-steps", "4", "--precision", "bf16-mixed")
    assert all(math.isfinite(x) for x in s["losses"])
    assert rel_diff(s["losses"], train("ddp", "--max-steps", "4")["losses"]) < 2e-3


def test_zero3_bf16_true_is_finite(train):
    s = train("zero3", "--max-steps", "4", "--precision", "bf16-true")
    assert all(math.isfinite(x) for x in s["losses"])


def _logits(folder: str, ids: torch.Tensor) -> torch.Tensor:
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        return model(input_ids=ids).logits


@pytest.mark.parametrize("strategy", ["zero2", "zero3", "fsdp", "zero3_offload_all"])
def test_hf_exports_reload_and_match_ddp_logits(train, strategy):
    ddp, other = train("ddp", *STEPS), train(strategy, *STEPS)
    assert other["export_check"]["max_abs_logit_diff"] <= 1e-4  # the run's own check, against the live model
    ids = torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(0))
    diff = (_logits(other["hf_export"], ids) - _logits(ddp["hf_export"], ids)).abs().max()
    assert diff < 1e-3


# Llama 3.x at tiny scale: tied embeddings, a 128,256-token vocabulary, rope_scaling llama3, 8 query heads
# per KV head. Every preset trains it to DDP's losses and exports it tied.
LLAMA3 = ("--model", "tiny-llama3", "--max-steps", "3", "--micro-batch-size", "2", "--seq-len", "64", "--checkpoint-every", "2")
PRESETS = ["zero2", "zero2_offload", "zero3", "zero3_offload", "zero3_offload_all", "fsdp", "fsdp_offload"]


@pytest.mark.parametrize("strategy", PRESETS)
def test_llama3_shape_every_preset_matches_ddp_and_exports_tied(train, strategy):
    ddp, other = train("ddp", *LLAMA3), train(strategy, *LLAMA3)
    assert rel_diff(other["losses"], ddp["losses"]) < 1e-5
    assert other["export_check"]["max_abs_logit_diff"] <= 1e-4
    folder = Path(other["hf_export"])
    assert json.loads((folder / "config.json").read_text())["tie_word_embeddings"] is True
    model, info = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, output_loading_info=True)
    assert not any(info.values()), info  # nothing missing, unexpected or newly initialised
    assert model.lm_head.weight is model.model.embed_tokens.weight  # one matrix, as trained
    # summary.json counts unique parameters (the MFU's N too): the tied matrix once
    assert other["model"]["tied"] and other["model"]["params"] == sum(p.numel() for p in model.parameters())
    ids = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        diff = (model(input_ids=ids).logits - _logits(ddp["hf_export"], ids)).abs().max()
    assert diff < 1e-3


@pytest.mark.parametrize("strategy", ["zero3", "fsdp"])
def test_llama3_shape_resumes_with_the_tie(train, recipe, tmp_path, strategy):
    # FSDP2's distributed checkpoint and DeepSpeed's shards both hold the shared matrix once
    full = train(strategy, *LLAMA3)
    resumed = recipe("run", "--strategy", strategy, "--accelerator", "cpu", "--devices", "2", "--output", tmp_path / "r",
                     *LLAMA3, "--resume", Path(full["output"]) / "checkpoints" / "step-000002")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    losses = json.loads((tmp_path / "r" / "summary.json").read_text())["losses"]
    assert rel_diff(losses, full["losses"]) <= 1e-5
