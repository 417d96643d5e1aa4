"""fsdp's `direct-grads` lever (strategies/fsdp_direct_grads.py, strategies/adamw_kernel.py; a default) trains what fsdp
trains without it.

One rank on CPU takes FSDP2's one-rank branch as one GPU does: the Llama 3 shape (tied embeddings, validation and a
checkpoint on the way) in bf16-mixed, clipped every step. There the AdamW steps with torch's fused kernel on the upcast
16-bit gradients, so the losses must be those of the run without it to the bit: with one micro-batch a step, with two
(the taken gradients summed in fp32), and resumed with the lever from a checkpoint the run without it wrote.
SHARDLAB_TRACE counts every module's gradients taken on every micro-batch. On a GPU: the Triton kernel against torch's
fused AdamW.
"""
from __future__ import annotations

import dataclasses
import importlib.util
from collections import Counter

import pytest
import torch

from shardlab.recipes.model import SHAPES
from tests.strategies.test_fsdp_direct_cast import ONE_RANK

WITHOUT = ("--experiments", "direct-cast,clip-in-adamw")  # fsdp's defaults before direct-grads


def test_direct_grads_trains_what_the_default_path_trains(train, tmp_path):
    trace = tmp_path / "trace.txt"
    stock, lever, stock2, lever2 = train.many([
        ("fsdp", (*ONE_RANK, *WITHOUT), None),
        ("fsdp", ONE_RANK, {"SHARDLAB_TRACE": str(trace)}),  # fsdp's defaults
        ("fsdp", (*ONE_RANK, *WITHOUT, "--grad-accum", "2"), None),
        ("fsdp", (*ONE_RANK, "--grad-accum", "2"), None)])
    assert lever["config"]["experiments"] == ["direct-cast", "clip-in-adamw", "direct-grads"]
    assert stock["config"]["experiments"] == ["direct-cast", "clip-in-adamw"]
    assert lever["losses"] == stock["losses"] and stock["losses"][-1] < stock["losses"][0]
    assert [v["loss"] for v in lever["val_losses"]] == [v["loss"] for v in stock["val_losses"]]
    assert lever2["losses"] == stock2["losses"] and lever2["losses"] != stock["losses"]
    events = Counter(line.split()[0] for line in trace.read_text().splitlines())
    groups = SHAPES["tiny-llama3"]["num_hidden_layers"] + 1  # each decoder layer, and the root (embeddings, norm)
    assert events["fsdp-direct-grads"] == groups * len(stock["losses"]), events
    assert events["fsdp-clip-in-adamw"] == len(stock["losses"]), events
    # resumed with the lever from the checkpoint of step 2 of the run without it: its AdamW state (torch's) reads as is
    stock_checkpoints = train.checkpoints("fsdp", *ONE_RANK, *WITHOUT)
    resumed = train("fsdp", *ONE_RANK, "--resume", str(stock_checkpoints / "step-000002"))
    assert resumed["losses"][-1] == stock["losses"][-1]


def test_direct_grads_is_refused_where_it_cannot_run_and_left_out_of_the_defaults_there(monkeypatch):
    from shardlab.core import registry
    from shardlab.core.errors import UserError
    from shardlab.core.strategy import RunContext
    from shardlab.strategies import fsdp_direct_cast

    fsdp = registry.get("fsdp").build()
    assert fsdp.default_experiments("bf16-true") == ("direct-cast", "clip-in-adamw")
    assert "direct-grads" in fsdp.default_experiments("32-true")
    ctx = RunContext(accelerator="gpu", devices=1, num_nodes=1, precision="bf16-true", grad_accum=1, grad_clip=1.0,
                     micro_batch_size=8, experiments=("direct-grads",))
    with pytest.raises(UserError, match="direct-grads: under bf16-true the weights are 16-bit too"):
        fsdp.check(ctx)
    monkeypatch.setattr(fsdp_direct_cast, "version", lambda name: "2.99.0+cu130")
    with pytest.raises(UserError, match="direct-grads: written against the private FSDP2 code of torch"):
        fsdp.check(dataclasses.replace(ctx, precision="bf16-mixed"))


def test_the_clip_goes_to_the_adamw_unless_clip_in_adamw_is_switched_off():
    """In-process: with clip-in-adamw on, the clip factor is the AdamW's divisor and the gradients stay as they are;
    switched off (SHARDLAB_AB=clip-in-adamw), they are multiplied by torch's clip factor and the AdamW divides by
    nothing."""
    from shardlab.core import switches
    from shardlab.strategies import fsdp_direct_grads as direct_grads

    model = torch.nn.Linear(4, 4, bias=False)
    grads = direct_grads.Grads()
    grads.add(model.weight, torch.full((4, 4), 1.0, dtype=torch.bfloat16))  # norm 4
    optimizer = direct_grads.adamw(model.parameters(), grads, lr=1e-3)
    direct_grads.clip(model, 1.0, grads, optimizer)
    assert float(optimizer.grad_scale) == pytest.approx(4.0) and float(grads.by_param[model.weight][0, 0]) == 1.0
    optimizer.grad_scale = None
    switches.switch("clip-in-adamw", False)
    try:
        direct_grads.clip(model, 1.0, grads, optimizer)
    finally:
        switches.switch("clip-in-adamw", True)
    assert optimizer.grad_scale is None and float(grads.by_param[model.weight][0, 0]) == 0.25


def test_the_step_takes_only_fp32_weights_with_gradients_of_their_shape():
    from shardlab.strategies.adamw_kernel import requirements

    weight = torch.zeros(4, 8)
    assert requirements([weight], [torch.zeros(4, 8, dtype=torch.bfloat16)]) == ""
    assert requirements([weight.bfloat16()], [torch.zeros(4, 8)]) == (
        "a weight of torch.bfloat16 (4, 8) with a gradient of torch.float32 (4, 8)")
    assert requirements([weight], [torch.zeros(8, 4).t()]).startswith("a weight of torch.float32 (4, 8)")


@pytest.mark.skipif(not (torch.cuda.is_available() and importlib.util.find_spec("triton")),
                    reason="the Triton kernel runs on CUDA")
@pytest.mark.parametrize("clip", [False, True])
def test_the_triton_step_is_torchs_fused_adamw(clip):
    """Three steps of tensors of several sizes (whole blocks, a partial last block, less than a block), their gradients
    bf16 and fp32 in one step, against torch's fused AdamW fed the fp32 upcasts; weight decay on. Within a few fp32
    roundings of the largest value."""
    from shardlab.strategies import adamw_kernel

    torch.manual_seed(0)
    sizes = (3 * adamw_kernel.BLOCK + 77, adamw_kernel.BLOCK, 300, 5 * adamw_kernel.BLOCK)
    ours = [[torch.randn(n, device="cuda") for n in sizes], [torch.zeros(n, device="cuda") for n in sizes],
            [torch.zeros(n, device="cuda") for n in sizes]]
    ref = [[t.clone() for t in kind] for kind in ours]
    steps_ours, steps_ref = [torch.tensor(0.0) for _ in sizes], [torch.tensor(0.0, device="cuda") for _ in sizes]
    scale = torch.tensor(2.5, device="cuda") if clip else None
    options = dict(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1)
    tables: dict = {}
    for _ in range(3):
        grads = [torch.randn(n, device="cuda").to(torch.bfloat16 if i % 2 == 0 else torch.float32)
                 for i, n in enumerate(sizes)]
        adamw_kernel.step(ours[0], grads, ours[1], ours[2], steps_ours, grad_scale=scale, tables=tables, **options)
        torch._foreach_add_(steps_ref, 1)
        torch._fused_adamw_(ref[0], [g.float().clone() for g in grads], ref[1], ref[2], [], steps_ref, amsgrad=False,
                            maximize=False, grad_scale=scale, found_inf=None, **options)
    assert len(tables) == 2 and [float(s) for s in steps_ours] == [3.0] * len(sizes)  # a table per gradient dtype
    for kind_ours, kind_ref in zip(ours, ref):
        for a, b in zip(kind_ours, kind_ref):
            assert (a - b).abs().max() <= 4e-7 * b.abs().max(), (a - b).abs().max()


@pytest.mark.skipif(not (torch.cuda.is_available() and importlib.util.find_spec("triton")),
                    reason="the Triton kernel runs on CUDA")
def test_the_triton_step_leaves_everything_where_found_inf_is_set():
    """zero3's direct-grads under late-wait hands the clip norm's inf/NaN check to the kernel: set, nothing moves (the
    step counts are still counted up: the caller takes them back)."""
    from shardlab.strategies import adamw_kernel

    torch.manual_seed(0)
    weights = [torch.randn(n, device="cuda") for n in (3 * adamw_kernel.BLOCK + 5, 100)]
    moments = [torch.ones_like(w) for w in weights], [torch.ones_like(w) for w in weights]
    before = [t.clone() for t in (*weights, *moments[0], *moments[1])]
    steps = [torch.tensor(4.0) for _ in weights]
    grads = [torch.randn_like(w).bfloat16() for w in weights]
    adamw_kernel.step(weights, grads, *moments, steps, lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1,
                      grad_scale=None, tables={}, found_inf=torch.ones((), device="cuda"))
    assert all(torch.equal(a, b) for a, b in zip((*weights, *moments[0], *moments[1]), before))
    assert [float(s) for s in steps] == [5.0, 5.0]
    adamw_kernel.step(weights, grads, *moments, steps, lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1,
                      grad_scale=None, tables={}, found_inf=torch.zeros((), device="cuda"))
    assert not torch.equal(weights[0], before[0]) and not torch.equal(weights[1], before[1])
