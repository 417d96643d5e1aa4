"""`recipe compare` end to end on CPU: real runs, real report files."""
from __future__ import annotations

import json
import math

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _compare(recipe, out, *flags):
    proc = recipe("compare", "--accelerator", "cpu", "--devices", "2", "--max-steps", "5", "--output", out, *flags)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
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


def test_injected_lr_difference_is_a_divergence_with_its_first_step(recipe, tmp_path):
    m = _compare(recipe, tmp_path, "--strategies", "ddp,zero3", "--test-lr-override", "zero3=0.003")
    assert m["parity"] is False
    assert m["first_divergent_step"] == 2 and m["first_divergent_strategy"] == "zero3"  # step 1 precedes any update
    assert any(s.startswith("lr differs") for s in m["suspects"])
    assert "DIVERGED" in (tmp_path / "report.md").read_text()


def test_no_align_flags_dtype_mismatches(recipe, tmp_path):
    # bf16-true: DDP keeps bf16 master weights, DeepSpeed fp32; aligned, both get fp32 masters (bf16-mixed).
    aligned = _compare(recipe, tmp_path / "aligned", "--strategies", "ddp,zero2", "--precision", "bf16-true")
    assert aligned["precision"] == "bf16-mixed" and not aligned["suspects"]
    assert any("master weights" in n for n in aligned["alignment_notes"])
    raw = _compare(recipe, tmp_path / "raw", "--strategies", "ddp,zero3", "--precision", "bf16-true", "--no-align")
    assert raw["precision"] == "bf16-true"
    assert any(s.startswith("master differs") for s in raw["suspects"])
    assert "master differs" in (tmp_path / "raw" / "report.md").read_text()
    assert all(math.isfinite(x) for x in raw["strategies"]["zero3"]["losses"])  # zero3 trains in bf16-true


# Refusals before any run (one strategy, the same one twice, an unknown one; nothing written to --output):
# test_bad_input.py's "compare: ..." cases.
