import json


# `recipe doctor` starts no process: it runs in this one (in_process, tests/conftest.py), the same interpreter and
# packages as the command's.

def test_doctor_reports_versions_strategies_ops_and_known_bad(in_process):
    rc, out, err = in_process("doctor", "--json")
    assert rc == 0, err
    r = json.loads(out)
    assert {"python", "torch", "lightning", "transformers", "accelerate", "deepspeed"} <= set(r["versions"])
    assert {"cuda", "nccl", "gpus", "bf16"} <= set(r["accelerator"])
    assert r["deepspeed_ops"]["cpu_adam"] is True  # offload presets need it
    assert all(s["runs_here"] for s in r["strategies"].values())  # every built-in runs on CPU over gloo
    assert r["known_bad"] and all(b["source"] and isinstance(b["affected"], bool) for b in r["known_bad"])


def test_doctor_table(in_process):
    rc, out, _ = in_process("doctor")
    assert rc == 0 and "known-bad combinations:" in out and "source:" in out
