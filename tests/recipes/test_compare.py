"""`recipe compare` end to end on CPU: real runs, real report files."""
from __future__ import annotations

import json
import math

import pytest

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _compare(recipe, out, *flags, stdout=None):
    """-> metrics.json; what compare printed goes into the list `stdout`, when given."""
    proc = recipe("compare", "--accelerator", "cpu", "--devices", "2", "--max-steps", "5", "--output", out, *flags)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    if stdout is not None:
        stdout.append(proc.stdout)
    return json.loads((out / "metrics.json").read_text())


def test_four_families_parity_and_report_files(four_families):
    # the shared compare of ddp, zero2, zero3, fsdp (tests/conftest.py): schedule, weight decay, accumulation with
    # clipping, an epoch's tail
    m, out = four_families["metrics"], four_families["output"]
    assert m["parity"] is True and m["max_rel_loss_diff"] <= 1e-5, m["verdict"]
    assert set(m["strategies"]) == {"ddp", "zero2", "zero3", "fsdp"} and m["reference"] == "ddp"
    assert all(m["strategies"][n]["max_abs_weight_diff"] < 1e-5 for n in ("zero2", "zero3", "fsdp"))  # hf/ exports agree too
    report = (out / "report.md").read_text()
    assert "PARITY" in report and "Precision audit" in report and "recipe compare" in report
    for png in ("loss_curves.png", "loss_diff.png", "throughput_memory.png"):
        data = (out / png).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 5000
    import matplotlib.image

    assert matplotlib.image.imread(out / "loss_curves.png").shape[2] in (3, 4)
    # 6 steps leave 3 measured ones after warm-up: the report marks the spread and refuses to rank throughput
    assert m["throughput"]["ranked"] is False and "fewer than 10" in m["throughput"]["note"]
    assert "Throughput not ranked: " in report and "min / median / max" in report
    assert all(s["step_time"]["measured"] == 3 for s in m["strategies"].values())
    # the runs' own output (runs/NAME.log): progress lines, none of the libraries' noise (issue 22 item 4)
    for name in ("ddp", "zero3", "fsdp"):
        log = (out / "runs" / f"{name}.log").read_text()
        # accumulation 2: a line after the first and the last optimizer step (and every 5 s), once each (rank 0)
        steps = [int(l.split()[2].split("/")[0]) for l in log.splitlines() if l.startswith("shardlab: step ")]
        assert steps[0] == 1 and steps[-1] == 6 and steps == sorted(set(steps)), log[-3000:]
        for noise in ("Epoch 0/", "FutureWarning", "litlogger", "Setting accelerator", "built successfully",
                      "GPU available", "Initializing distributed", "initializing deepspeed", "is deprecated"):
            assert noise not in log, (name, noise, log[-3000:])


def _metrics(losses: dict, step_s: dict) -> dict:
    """metrics.json as recipes/compare.py writes it, from per-step losses and step times (no process started)."""
    from shardlab.core import compare as cmp

    parity = cmp.loss_parity(losses, "32-true")
    names = list(losses)
    times = {n: cmp.step_times(step_s[n]) for n in names}
    tokens = {n: 1000 / times[n].median_s for n in names}
    return {"verdict": cmp.verdict(parity, names[0], names[1:], []), "reference": names[0], "precision": "32-true",
            "tolerance": parity.tolerance, "aligned": True, "alignment_notes": ["nothing to align"],
            "mismatches_before_alignment": [], "suspects": [], "command": "recipe compare",
            "audit": {n: {"compute": "fp32", "master": "fp32", "grad_reduce": "fp32", "optimizer_states": "fp32"}
                      for n in names},
            "throughput": vars(cmp.throughput(times, tokens)),
            "strategies": {n: {"tokens_per_s": tokens[n], "step_time_spread": times[n].spread,
                               "step_time": vars(times[n]), "identical_to_reference": parity.identical(n),
                               "peak_memory_bytes": [2**30], "final_loss": losses[n][-1], "losses": losses[n],
                               "abs_loss_diff": parity.abs_diff.get(n), "rel_loss_diff": parity.rel_diff.get(n),
                               "max_abs_weight_diff": 0.0} for n in names}}


def test_report_says_identical_and_draws_the_tolerance(tmp_path):
    from shardlab.recipes import plots
    from shardlab.recipes.compare_report import write_report

    losses = {"zero3": [5.0, 4.0, 3.5], "fsdp": [5.0, 4.0, 3.5], "ddp": [5.0, 4.0, 3.50001]}
    m = _metrics(losses, {n: [1.0] * 20 for n in losses})
    write_report(tmp_path / "report.md", m)
    report = (tmp_path / "report.md").read_text()
    assert "fsdp identical to zero3 at every step" in report and "within 1e-05 relative of zero3" in report
    fsdp_row = next(l for l in report.splitlines() if l.startswith("| fsdp |"))
    assert "| 3.50000 | identical | identical |" in fsdp_row, fsdp_row  # not 0.00e+00
    assert "| 1 | 5.000000 | 5.000000 | 5.000000 | identical | identical |" in report
    assert "| 3 | 3.500000 | 3.500000 | 3.500010 | identical | 1.0e-05 / 2.9e-06 |" in report
    assert "Throughput ranked by median tokens/s" in report
    # the difference plot: the tolerance as a line, an exact 0 said in words, not drawn at 1e-12
    import matplotlib.pyplot as plt

    from shardlab.core import compare as cmp

    parity = cmp.loss_parity(losses, "32-true")
    fig = plots.loss_diff_figure(parity.rel_diff, "zero3", parity.tolerance)
    ax = fig.axes[0]
    assert [list(l.get_ydata()) for l in ax.lines if l.get_label() == "tolerance 1e-05"] == [[1e-05, 1e-05]]
    assert [t.get_text() for t in ax.texts] == ["fsdp: identical to zero3 at every step (difference exactly 0)"]
    assert [l.get_label() for l in ax.lines] == ["tolerance 1e-05", "ddp vs zero3 (exactly 0 at 2 step(s), not drawn)"]
    plt.close(fig)
    plots.loss_diff(parity.rel_diff, "zero3", parity.tolerance, tmp_path / "loss_diff.png")
    assert (tmp_path / "loss_diff.png").read_bytes().startswith(PNG_MAGIC)


def test_injected_lr_difference_is_a_divergence_with_its_first_step(recipe, tmp_path):
    printed: list[str] = []
    # --no-export: the exports of ddp and zero3 (tiny, fp32, 2 ranks) and the weight check: the four-family compare's
    m = _compare(recipe, tmp_path, "--strategies", "ddp,zero3", "--test-lr-override", "zero3=0.003", "--no-export",
                 stdout=printed)
    # each run's progress while it trains, named by its place in the comparison; its whole output in its log
    lines = printed[0].splitlines()
    for tag in ("compare: [1/2] ddp: ", "compare: [2/2] zero3: "):
        assert any(l.startswith(tag + "step 1/5  loss ") and "tokens/s" in l and " left" in l for l in lines), printed[0]
        assert any(l.startswith(tag + "step 5/5  loss ") and l.endswith("done") for l in lines), printed[0]
        assert any(l.startswith(tag + "loss ") for l in lines), printed[0]
    assert "shardlab: step 5/5" in (tmp_path / "runs" / "zero3.log").read_text()
    assert m["parity"] is False
    assert m["first_divergent_step"] == 2 and m["first_divergent_strategy"] == "zero3"  # step 1 precedes any update
    assert any(s.startswith("lr differs") for s in m["suspects"])
    assert "DIVERGED" in (tmp_path / "report.md").read_text()


def test_alignment_of_the_real_plans_gives_both_fp32_masters():
    # bf16-true: DDP keeps bf16 master weights, DeepSpeed fp32; aligned, both get fp32 masters (bf16-mixed). In-process:
    # the plans compare resolves from the adapters, before any run starts (the runs themselves: the test below).
    from shardlab.core import compare as cmp
    from shardlab.core.config import RunConfig
    from shardlab.recipes.compare import _plans, align_plans

    base = RunConfig(strategy="ddp", accelerator="cpu", devices=2, precision="bf16-true", max_steps=5)
    alignment, _, plans, before = align_plans(base, ["ddp", "zero2"], _plans(base, ["ddp", "zero2"]), no_align=False)
    assert alignment.precision == "bf16-mixed" and not cmp.mismatches(plans)
    assert any(s.startswith("master differs") for s in before)
    assert any("master weights" in n for n in alignment.notes)


def test_no_align_flags_dtype_mismatches(recipe, tmp_path):
    raw = _compare(recipe, tmp_path / "raw", "--strategies", "ddp,zero3", "--precision", "bf16-true", "--no-align",
                   "--no-export")
    assert raw["precision"] == "bf16-true"
    assert raw["strategies"]["zero3"]["max_abs_weight_diff"] is None  # --no-export: no final weights to compare
    assert any(s.startswith("master differs") for s in raw["suspects"])
    assert "master differs" in (tmp_path / "raw" / "report.md").read_text()
    assert all(math.isfinite(x) for x in raw["strategies"]["zero3"]["losses"])  # zero3 trains in bf16-true


# Refusals before any run (one strategy, the same one twice, an unknown one; nothing written to --output):
# test_bad_input.py's "compare: ..." cases.


def test_validation_loss_parity_in_the_verdict_and_the_report(tmp_path):
    """The runs' val_losses against the first strategy's, with the training losses' tolerance; in-process, as
    recipes/compare.py computes and writes them (the runs' own validation losses: test_parity.py)."""
    from shardlab.core import compare as cmp
    from shardlab.recipes.compare_report import write_report

    val = lambda *losses: [{"step": s, "loss": x, "tokens": 456} for s, x in zip((2, 4), losses)]  # noqa: E731
    assert cmp.val_loss_parity({"ddp": [], "fsdp": []}, "32-true") is None  # no validation, nothing said
    close = cmp.val_loss_parity({"ddp": val(3.0, 2.5), "zero3": val(3.0, 2.5), "fsdp": val(3.00001, 2.5)}, "32-true")
    assert close["parity"] and close["verdict"] == ("validation PARITY: every validation loss within 1e-05 relative of "
                                                    "ddp (max 3.33e-06) at steps [2, 4]")
    far = cmp.val_loss_parity({"ddp": val(3.0, 2.5), "fsdp": val(3.0, 2.6)}, "32-true")
    assert not far["parity"] and far["verdict"].startswith("validation DIVERGED: fsdp leaves ddp at step 4")
    other_steps = cmp.val_loss_parity({"ddp": val(3.0, 2.5), "fsdp": val(3.0)}, "32-true")
    assert not other_steps["parity"] and "validated at other steps" in other_steps["verdict"]
    m = _metrics({n: [5.0, 4.0, 3.5] for n in ("ddp", "zero3", "fsdp")}, {n: [1.0] * 20 for n in ("ddp", "zero3", "fsdp")})
    write_report(tmp_path / "report.md", {**m, "validation": close})
    report = (tmp_path / "report.md").read_text()
    assert "## Validation loss" in report and f"**{close['verdict']}**" in report
    assert "| 2 | 3.000000 | 3.000000 | 3.000010 | identical | 3.3e-06 |" in report
    assert "| 4 | 2.500000 | 2.500000 | 2.500000 | identical | identical |" in report


def test_an_entry_names_a_preset_and_its_variants():
    """`--strategies` entries (in-process): PRESET, PRESET:float8, PRESET:offload-ratio=R, combined; bad ones refused
    (test_float8.py runs the refusals through the CLI)."""
    from shardlab.core.errors import UserError
    from shardlab.recipes.compare import entry

    assert entry("fsdp") == {"strategy": "fsdp"}
    assert entry("fsdp:float8") == {"strategy": "fsdp", "float8": True}
    assert entry("zero3_offload:float8:offload-ratio=0.25") == {"strategy": "zero3_offload", "float8": True,
                                                                "offload_ratio": 0.25}
    assert entry("zero3:experiment=fused-step") == {"strategy": "zero3", "experiments": ["fused-step"]}
    assert entry("zero3:experiment=fused-step:experiment=lean-config:experiment=fused-step") == {
        "strategy": "zero3", "experiments": ["fused-step", "lean-config"]}
    assert entry("zero3:experiment=none") == {"strategy": "zero3", "experiments": []}
    for bad in ("fsdp:float8=1", "zero3_offload:offload-ratio=x", "zero3_offload:offload-ratio=0", "fsdp:fp8",
                "zero3:experiment", "zero3:experiment="):
        with pytest.raises(UserError):
            entry(bad)


def test_an_experiment_entry_adds_to_the_flag_and_is_compared_not_suspected():
    """In-process: an entry's experiments join --experiments'; the field it sets is left out of the suspects (what
    differs by design), as float8 and offload_ratio are."""
    from shardlab.core import compare as cmp
    from shardlab.core.config import RunConfig
    from shardlab.recipes.compare import compared, entry_config

    base = RunConfig(strategy="zero3", experiments=["lean-config"])
    assert entry_config(base, "zero3").experiments == ["lean-config"]
    assert entry_config(base, "zero3:experiment=fused-step").experiments == ["lean-config", "fused-step"]
    assert entry_config(RunConfig(strategy="zero3"), "zero3").experiments is None  # the preset's defaults
    assert entry_config(RunConfig(strategy="zero3"), "zero3:experiment=none").experiments == []
    names = ["zero3:experiment=none", "zero3:experiment=fused-step"]
    configs = {n: entry_config(RunConfig(strategy="zero3"), n).model_dump() for n in names}
    assert "experiments" in compared(names) and cmp.config_differences(configs, compared(names)) == []
    assert cmp.config_differences(configs) == [
        "experiments differs: zero3:experiment=none [], zero3:experiment=fused-step ['fused-step']"]
    assert "experiments" in compared(["zero3", "fsdp"])  # each preset's own defaults: by design
