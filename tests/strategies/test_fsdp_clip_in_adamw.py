"""fsdp's `clip-in-adamw` lever (strategies/fsdp_clip_in_adamw.py): the clip factor divided out inside the fused AdamW.

In-process: one AdamW step with the factor as grad_scale against torch's clip_grad_norm_ and the same fused step, where
the norm is over the threshold (one rounding apart) and under it (the same to the bit). One CPU rank through FSDP2
(DTensor gradients, the norm made whole): the Llama 3 shape in bf16-mixed, clipped every step, direct-cast and
clip-in-adamw against torch's clip and AdamW (`--experiments none`).
"""
from __future__ import annotations

from collections import Counter

import torch

from shardlab.strategies import fsdp_clip_in_adamw
from tests.strategies.test_fsdp_direct_cast import ONE_RANK


def _step(clip_in_adamw: bool, max_norm: float) -> torch.Tensor:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 4))
    model(torch.randn(8, 16)).square().sum().backward()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True)
    if clip_in_adamw:
        fsdp_clip_in_adamw.clip(model, max_norm, optimizer)
    else:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    fsdp_clip_in_adamw.clear(optimizer)
    assert optimizer.grad_scale is None
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_the_clip_divided_out_in_adamw_is_torchs_clip():
    """Over the threshold the two round apart by about one fp32 step of the update, relative to the weights: within 1e-6
    of their largest. Element by element that can be more near zero, and how much depends on the CPU's vector kernels
    (an AVX-512 machine: 2.5e-6 at one small weight, 5.7e-8 of the largest)."""
    clipped, reference = _step(True, 0.5), _step(False, 0.5)
    assert (clipped - reference).abs().max() <= 1e-6 * reference.abs().max() and not torch.equal(clipped, reference)
    assert torch.equal(_step(True, 1e6), _step(False, 1e6))  # under the threshold: nothing divided, same bits


def test_fsdp_one_rank_trains_with_the_clip_in_adamw(train, tmp_path):
    trace = tmp_path / "trace.txt"
    # the two one-rank runs at once (train.many, tests/conftest.py): direct-cast and clip-in-adamw (fsdp's defaults
    # less direct-grads, which clips its own way) under SHARDLAB_TRACE, and torch's clip and AdamW
    # (test_fsdp_direct_cast.py's stock run too)
    folded, stock = train.many([("fsdp", (*ONE_RANK, "--experiments", "direct-cast,clip-in-adamw"),
                                 {"SHARDLAB_TRACE": str(trace)}),
                                ("fsdp", (*ONE_RANK, "--experiments", "none"), None)])
    assert folded["config"]["experiments"] == ["direct-cast", "clip-in-adamw"]
    steps = len(stock["losses"])
    assert Counter(line.split()[0] for line in trace.read_text().splitlines())["fsdp-clip-in-adamw"] == steps
    assert folded["losses"][0] == stock["losses"][0]  # before any step
    for a, b in zip(folded["losses"], stock["losses"]):
        assert abs(a - b) <= 2e-3 * abs(b), (folded["losses"], stock["losses"])
