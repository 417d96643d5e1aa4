"""`--float8` (recipes/float8.py): torchao's float8 linears in the decoder layers, on 2 CPU ranks over gloo.

One `recipe compare` of fsdp (bf16) against every built-in preset cleared for float8 (Capabilities.float8: ddp,
zero2, zero2_offload, zero3, fsdp, fsdp_offload) on the Llama 3 shape (tied embeddings, 128k vocabulary, one KV head of 8: k_proj and v_proj are 8 wide and stay bf16), then one resume of the fsdp:float8
run from its own checkpoint. The refusals and the estimate are checked in this process."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from shardlab.core import registry

# 16 tokens a sequence (a multiple of 16, as _scaled_mm needs): torch's float8 matmul on the CPU costs by the token,
# about 1.2 s a step at 64 and 0.3 s at 16; nothing checked here depends on the length
FLAGS = ("--model", "tiny-llama3", "--max-steps", "4", "--micro-batch-size", "2", "--seq-len", "16",
         "--precision", "bf16-mixed", "--checkpoint-every", "2")
# every built-in preset that takes --float8 runs once here: a preset cleared later is tested without a change
CLEARED = tuple(n for n, p in registry.presets().items() if p.capabilities.float8 and p.source == "built-in")
# Per decoder layer of tiny-llama3: q_proj and o_proj (64 x 64), gate, up and down (64 <-> 176); 2 layers.
CONVERTED = 10


@pytest.fixture(scope="module")
def float8_compare(recipe, module_folder) -> dict:
    out = module_folder("float8-compare")
    proc = recipe("compare", "--strategies", "fsdp," + ",".join(f"{n}:float8" for n in CLEARED), "--accelerator", "cpu",
                  "--devices", "2", *FLAGS, "--output", out, timeout=1200)  # 7 runs of ~90 s on CI's 2 cores
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    names = ("fsdp", *(f"{n}-float8" for n in CLEARED))
    runs = {n: json.loads((out / "runs" / n / "summary.json").read_text()) for n in names}
    return {"out": out, "metrics": json.loads((out / "metrics.json").read_text()), "runs": runs,
            "printed": proc.stdout + proc.stderr}


def test_float8_trains_beside_bf16_within_the_float8_tolerance(float8_compare):
    from shardlab.core.compare import FLOAT8_TOLERANCE

    m, runs = float8_compare["metrics"], float8_compare["runs"]
    assert m["parity"] and m["tolerance"] == FLOAT8_TOLERANCE and m["verdict"].startswith("PARITY"), m["verdict"]
    assert m["suspects"] == []  # float8 is what is compared, not a suspect
    assert runs["fsdp"]["float8_linears"] == 0 and runs["fsdp"]["config"]["float8"] is False
    for name in (f"{n}:float8" for n in CLEARED):
        run = runs[name.replace(":", "-")]
        assert run["config"]["float8"] is True and run["float8_linears"] == CONVERTED  # it took effect, under each
        rel = m["strategies"][name]["rel_loss_diff"]
        assert 0 < max(rel) < 1e-2, rel  # float8 rounds differently from bf16, and not by much
        assert run["losses"][-1] < run["losses"][0]
        # the export check compares with the same float8 linears, so it sees the weights only; hf/ is a plain model
        # (DeepSpeed computes with bf16 weights, the check with the fp32 export: 1.7e-2 under zero2, zero3 and fsdp
        # at --seq-len 16); the reload's RoPE frequencies are the trained model's (zero3's once were not:
        # recipes/export.py)
        assert run["export_check"]["relative"] < 3e-2, run["export_check"]
        assert json.loads((Path(run["hf_export"]) / "config.json").read_text())["tie_word_embeddings"] is True
    # the backends agree on float8 as closely as they do in bf16
    from tests.conftest import rel_diff

    for name in (f"{n}-float8" for n in CLEARED if n != "fsdp"):
        assert rel_diff(runs[name]["losses"], runs["fsdp-float8"]["losses"]) < 2e-3, name
    lines = float8_compare["printed"].splitlines()
    assert not [l for l in lines if "Failed to load" in l or "is an Enum subclass" in l]  # torchao's import, quiet
    report = (float8_compare["out"] / "report.md").read_text()
    assert all(f"| {n}:float8 |" in report for n in CLEARED)


def test_a_float8_fsdp_checkpoint_resumes_to_the_same_losses(float8_compare, recipe, tmp_path):
    """FSDP2's float8 all-gather keeps its weights in a torchao tensor subclass: its checkpoint still restores them.
    Resumed from the compare's own config of that run (compare reduces every strategy's gradients in fp32)."""
    run_dir = float8_compare["out"] / "runs" / "fsdp-float8"
    first = float8_compare["runs"]["fsdp-float8"]
    proc = recipe("run", "--config", run_dir.with_suffix(".yaml"), "--resume", run_dir / "checkpoints" / "step-000002",
                  "--output", tmp_path / "resumed", "--no-export")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    again = json.loads((tmp_path / "resumed" / "summary.json").read_text())
    assert again["float8_linears"] == CONVERTED
    assert again["losses"][-2:] == pytest.approx(first["losses"][-2:], rel=1e-6)


@pytest.mark.parametrize("args, expected", [
    (["run", "--float8"], "--float8: needs --precision bf16-mixed or bf16-true"),  # CPU's auto precision is 32-true
    (["run", "--float8", "--strategy", "zero3_offload", "--precision", "bf16-mixed"],
     "strategy 'zero3_offload' is not cleared for float8 linears; use one that is (ddp, zero2, zero2_offload, zero3, "
     "fsdp, fsdp_offload)"),
    (["compare", "--strategies", "fsdp,fsdp:fast"], "unknown variant 'fast'; PRESET:float8, PRESET:offload-ratio=R "
                                                      "or PRESET:experiment=NAME"),
    (["compare", "--strategies", "zero3_offload,zero3_offload:offload-ratio=2"], "offload-ratio=2 is not a share in (0, 1]"),
])
def test_float8_refusals_are_one_line(in_process, tmp_path, args, expected):
    rc, _, err = in_process(*args, "--accelerator", "cpu", "--output", tmp_path / "out")
    lines = [l for l in err.splitlines() if l.startswith("recipe: error:")]
    assert rc == 2 and len(lines) == 1 and expected in lines[0], err
    assert not (tmp_path / "out").exists()


def test_convert_swaps_the_layers_linears_only():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from shardlab.recipes import float8
    from shardlab.recipes.model import SHAPES

    fields = {k: v for k, v in SHAPES["tiny-llama3"].items() if k != "default_seq_len"}
    model = LlamaForCausalLM(LlamaConfig(**fields))
    names = {n for n, p in model.named_parameters()}
    assert float8.convert(model) == CONVERTED == float8.count(model)
    assert type(model.lm_head) is torch.nn.Linear  # the output projection stays 16-bit
    assert type(model.model.layers[0].self_attn.k_proj) is torch.nn.Linear  # 8 wide: not a multiple of 16
    assert {n for n, p in model.named_parameters()} == names  # checkpoints and exports keep their keys


def test_float8_estimate_drops_ddps_autocast_copies_of_the_converted_weights():
    from shardlab.core import memory
    from shardlab.recipes.model import llama_fields
    from shardlab.strategies.ddp import ddp_states

    shape = memory.shape_of(llama_fields("llama-3.2-1b"))
    work = memory.Workload(micro_batch_size=4, seq_len=2048, activation_checkpointing=False, precision="bf16-mixed",
                           gpus_per_node=1, num_nodes=1)
    bf16, fp8 = ddp_states(shape, work), ddp_states(shape, dataclasses.replace(work, float8=True))
    converted = shape.layers * (shape.decoder_layer_params - 2 * shape.hidden)
    assert bf16.forward_only - fp8.forward_only == 2 * converted and bf16.gpu == fp8.gpu
