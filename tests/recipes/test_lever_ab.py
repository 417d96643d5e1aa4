"""SHARDLAB_AB (recipes/lever_ab.py, core/switches.py): a lever switched off and on between the steps of one run.

Real one-rank CPU runs of the Llama 3 shape in bf16-mixed with clipping, 13 steps in blocks of 2 (5 warm-up steps with
the lever on, then off, on, on, off): fsdp's direct-cast and zero3's no-fetch-sync, param-lists, no-nvtx and late-wait change no
value, so a run that switches them must train what the stock path trains, to the bit (fsdp's clip-in-adamw: within
its clip's rounding), while SHARDLAB_TRACE shows the lever acting on every step it was on and on no other. The
statistics are checked on given step times; bad SHARDLAB_AB values with the other bad input (test_bad_input.py).
"""
from __future__ import annotations

import pytest

from tests.conftest import CHAT_DATA

AB = ("--model", "tiny-llama3", "--max-steps", "13", "--micro-batch-size", "2", "--seq-len", "64", "--data",
      str(CHAT_DATA), "--devices", "1", "--precision", "bf16-mixed", "--grad-clip", "0.05", "--no-export")


LEVERS = [  # strategy, lever, the stock path's experiments, the switched run's, the lever's SHARDLAB_TRACE event
    ("fsdp", "direct-cast", "none", "direct-cast", "fsdp-reduce-in-place"),
    ("fsdp", "clip-in-adamw", "none", "direct-cast,clip-in-adamw", "fsdp-clip-in-adamw"),
    ("zero3", "no-fetch-sync", "lean-config,fused-step", "lean-config,fused-step,no-fetch-sync", "zero3-fetch-no-sync"),
    ("zero3", "param-lists", "lean-config,fused-step", "lean-config,fused-step,param-lists", "zero3-param-list"),
    ("zero3", "no-nvtx", "lean-config,fused-step", "lean-config,fused-step,no-nvtx", "deepspeed-nvtx-range"),
    ("zero3", "late-wait", "lean-config,fused-step", "lean-config,fused-step,late-wait", "zero3-late-wait"),
]


@pytest.fixture(scope="module")
def runs(train, tmp_path_factory) -> dict:
    """Every lever's switched run (under SHARDLAB_TRACE and SHARDLAB_AB) and its stock path's run (without them), the 8
    distinct runs two at a time (train.many, tests/conftest.py: one rank each, one core each).
    -> {lever: (switched summary, stock summary, trace file)}"""
    folder = tmp_path_factory.mktemp("lever-ab")
    wanted = []
    for strategy, lever, stock, with_lever, _ in LEVERS:
        env = {"SHARDLAB_TRACE": str(folder / f"{lever}.txt"), "SHARDLAB_AB": f"{lever}:2"}
        wanted += [(strategy, (*AB, "--experiments", with_lever), env), (strategy, (*AB, "--experiments", stock), None)]
    made = iter(train.many(wanted))
    return {lever: (next(made), next(made), folder / f"{lever}.txt") for _, lever, *_ in LEVERS}


@pytest.mark.parametrize("strategy, lever, stock, with_lever, event", LEVERS)
def test_a_switched_lever_trains_what_the_stock_path_trains(runs, strategy, lever, stock, with_lever, event):
    switched, plain, trace = runs[lever]
    if lever == "clip-in-adamw":  # the clip rounds once differently where it clips (every step here)
        assert switched["losses"] == pytest.approx(plain["losses"], rel=2e-3)
    else:
        assert switched["losses"] == plain["losses"]
    assert plain["losses"][-1] < plain["losses"][0]
    ab = switched["lever_ab"]
    assert plain["lever_ab"] is None
    assert ab["lever"] == lever and ab["block"] == 2 and ab["steps"] == {"on": 2, "off": 2}, ab
    assert ab["speedup"] == pytest.approx(ab["median_step_s"]["off"] / ab["median_step_s"]["on"])
    assert f"shardlab: A/B {lever}: on " in switched["log"]
    # the lever's own event (for no-nvtx: a range DeepSpeed still pushes, i.e. the lever not acting), step by step
    steps: list[tuple[str, int]] = []
    for line in trace.read_text().splitlines():
        name = line.split()[0]
        if name.startswith("ab-step-"):
            steps.append((name.removeprefix("ab-step-"), 0))
        elif name == event and steps:
            steps[-1] = (steps[-1][0], steps[-1][1] + 1)
    assert [s for s, _ in steps] == ["on"] * 5 + ["off", "off", "on", "on", "on", "on", "off", "off"]
    acting = {s: {n > 0 for side, n in steps if side == s} for s in ("on", "off")}
    assert acting == ({"on": {False}, "off": {True}} if lever == "no-nvtx" else {"on": {True}, "off": {False}}), steps


def test_the_sides_and_their_interval():
    from shardlab.recipes.lever_ab import side, summarize

    assert [side(s, 2) for s in range(13)] == [(True, False)] * 5 + [
        (False, False), (False, True), (True, False), (True, True), (True, False), (True, True), (False, False),
        (False, True)]
    # 5 warm-up steps, then blocks of 4: off 1.0 s a step, on 0.9 s, each block's first step slower (left out)
    times = [9.0] * 5 + [t for k in range(12) for t in ([5.0] + [0.9 if k % 4 in (1, 2) else 1.0] * 3)]
    r = summarize("x", 4, times, tokens_per_step=900)
    assert r["steps"] == {"on": 18, "off": 18} and r["median_step_s"] == {"on": 0.9, "off": 1.0}
    assert r["tokens_per_s"] == {"on": 1000, "off": 900} and r["speedup"] == pytest.approx(1 / 0.9)
    assert r["speedup_95"] == pytest.approx([1 / 0.9, 1 / 0.9])  # no spread within a side: none in the interval
    # one block on each side: no interval; too few steps: no speedup
    assert summarize("x", 4, times[:13], 900)["speedup_95"] is None
    assert summarize("x", 4, times[:9], 900)["speedup"] is None
