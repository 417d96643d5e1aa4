"""`recipe plan` and `recipe run --strategy auto`, as a user runs them."""
from __future__ import annotations

import json


def test_plan_json_for_a_cluster_not_here(recipe):
    proc = recipe("plan", "--model", "llama-13b", "--accelerator", "gpu", "--gpus", "8", "--gpu-memory-gib", "80",
                  "--num-nodes", "2", "--cpu-memory-gib", "1024", "--micro-batch-size", "1", "--seq-len", "2048", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["choice"] == "zero3" and all(isinstance(r, str) for r in out["reasons"])
    names = {s["name"] for s in out["strategies"]}
    assert {"ddp", "zero2", "zero3", "fsdp", "zero3_offload"} <= names
    assert all({"name", "gpu_bytes", "cpu_bytes", "fits"} <= set(s) for s in out["strategies"])


def test_plan_table(recipe):
    proc = recipe("plan", "--model", "llama-7b", "--accelerator", "gpu", "--gpus", "8", "--gpu-memory-gib", "80",
                  "--cpu-memory-gib", "1024")
    assert proc.returncode == 0, proc.stderr
    assert "choice: fsdp" in proc.stdout and "zero3_offload_all" in proc.stdout and "  - " in proc.stdout


def test_run_auto_on_cpu_end_to_end(recipe, tmp_path):
    proc = recipe("run", "--strategy", "auto", "--accelerator", "cpu", "--devices", "2", "--max-steps", "3",
                  "--output", tmp_path / "o")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "--strategy auto chose fsdp" in proc.stdout
    s = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert s["strategy"] == "fsdp" and s["auto"]["choice"] == "fsdp" and s["auto"]["reasons"]
    assert s["memory_estimate"]["gpu_bytes"] > 0 and len(s["peak_memory_bytes"]) == 2




def test_plan_says_the_batch_it_picks_for_offload(recipe):
    proc = recipe("plan", "--model", "llama-7b", "--accelerator", "gpu", "--gpus", "1", "--gpu-memory-gib", "80",
                  "--cpu-memory-gib", "512", "--micro-batch-size", "8", "--seq-len", "2048", "--activation-checkpointing",
                  "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["choice"] == "zero3_offload" and out["grad_accum"] == 8
    assert any(r.startswith("gradient accumulation 8") for r in out["reasons"])


def test_plan_reports_the_largest_micro_batch_that_fits(recipe):
    args = ("plan", "--model", "llama-1b", "--accelerator", "gpu", "--gpus", "1", "--cpu-memory-gib", "64",
            "--micro-batch-size", "4", "--seq-len", "2048")
    big, small = (json.loads(recipe(*args, "--gpu-memory-gib", gib, "--json").stdout) for gib in ("141", "40"))
    assert big["choice"] == small["choice"] == "fsdp"
    assert big["largest_micro_batch"] > small["largest_micro_batch"] >= 1
    proc = recipe(*args, "--gpu-memory-gib", "141")
    assert f"micro-batch: up to {big['largest_micro_batch']} fits with fsdp" in proc.stdout
    assert json.loads(recipe(*args[:3], "--accelerator", "cpu", "--seq-len", "128", "--json").stdout)["largest_micro_batch"] is None
