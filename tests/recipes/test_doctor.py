import json


def test_doctor_reports_versions_strategies_ops_and_known_bad(recipe):
    proc = recipe("doctor", "--json")
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert {"python", "torch", "lightning", "transformers", "accelerate", "deepspeed"} <= set(r["versions"])
    assert {"cuda", "nccl", "gpus", "bf16"} <= set(r["accelerator"])
    assert r["deepspeed_ops"]["cpu_adam"] is True  # offload presets need it
    assert all(s["runs_here"] for s in r["strategies"].values())  # every built-in runs on CPU over gloo
    assert r["known_bad"] and all(b["source"] and isinstance(b["affected"], bool) for b in r["known_bad"])


def test_doctor_table(recipe):
    proc = recipe("doctor")
    assert proc.returncode == 0 and "known-bad combinations:" in proc.stdout and "source:" in proc.stdout
