"""`recipe doctor`: versions, strategies, known-bad combinations with their sources, and the multi-node checks."""
import json
import re
import socket
from pathlib import Path

import torch

from shardlab.recipes import doctor


# `recipe doctor` starts no process: it runs in this one (in_process, tests/conftest.py), the same interpreter and
# packages as the command's.

def test_doctor_reports_versions_strategies_ops_and_known_bad(in_process):
    rc, out, err = in_process("doctor", "--json")
    assert rc == 0, err
    r = json.loads(out)
    assert {"python", "torch", "lightning", "transformers", "accelerate", "deepspeed", "torchao"} <= set(r["versions"])
    assert r["versions"]["torchao"] and "liger-kernel" in r["versions"]  # --float8 installed with the tests; Liger optional
    assert {"cuda", "nccl", "gpus", "bf16"} <= set(r["accelerator"])
    assert r["deepspeed_ops"]["cpu_adam"] is True  # offload presets need it
    assert all(s["runs_here"] for s in r["strategies"].values())  # every built-in runs on CPU over gloo
    assert r["known_bad"] and all(b["source"] and isinstance(b["affected"], bool) for b in r["known_bad"])


def test_doctor_table(in_process):
    rc, out, _ = in_process("doctor")
    assert rc == 0 and "known-bad combinations:" in out and "source:" in out


# What a cluster user checks before a multi-node job, and where the known-bad list comes from.

ROOT = Path(__file__).parents[2]


def test_known_bad_sources_are_public_or_in_this_repository():
    for _, _, _, source in doctor.KNOWN_BAD:
        assert "../" not in source and "workplace" not in source and "machine notes" not in source, source
        files = re.findall(r"[\w./-]+/[\w.-]+\.(?:py|md)", source)
        assert "https://" in source or files, source
        for f in files:
            assert (ROOT / f).is_file(), f"{f} (cited in: {source})"


def test_nccl_version_or_not_applicable():
    v = doctor.nccl_version()
    if torch.version.cuda and torch.distributed.is_nccl_available():
        assert re.fullmatch(r"\d+(\.\d+)*", v), v
    else:
        assert v.startswith("not applicable ("), v


def test_network_env_shows_what_is_set_and_checks_interfaces():
    r = doctor.network_env({"NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "lo", "GLOO_SOCKET_IFNAME": "lo"})
    assert r["vars"]["NCCL_DEBUG"]["value"] == "INFO" and r["vars"]["MASTER_ADDR"]["value"] is None
    assert set(doctor.NETWORK_ENV) >= {"NCCL_SOCKET_IFNAME", "NCCL_IB_DISABLE", "NCCL_DEBUG", "MASTER_ADDR",
                                       "MASTER_PORT", "GLOO_SOCKET_IFNAME"} and not r["warnings"]
    assert "lo" in r["interfaces"]
    # NCCL matches prefixes ('l' would be fine), gloo exact names; '^' excludes, so anything else matches
    assert not doctor.network_env({"NCCL_SOCKET_IFNAME": "l,nosuch", "GLOO_SOCKET_IFNAME": "lo"})["warnings"]
    assert not doctor.network_env({"NCCL_SOCKET_IFNAME": "^docker,lo"})["warnings"]
    bad = doctor.network_env({"NCCL_SOCKET_IFNAME": "=l", "GLOO_SOCKET_IFNAME": "nosuch0"})["warnings"]
    assert len(bad) == 2 and bad[0].startswith("NCCL_SOCKET_IFNAME==l names no interface") and "nosuch0" in bad[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_rendezvous_address_resolves_and_port_is_free(monkeypatch):
    port = _free_port()
    checks = doctor.rendezvous("localhost", port)["checks"]
    assert [c["ok"] for c in checks] == [True, True] and "127.0.0.1" in checks[0]["text"], checks
    with socket.socket() as taken:  # something listening on the port
        taken.bind(("127.0.0.1", port))
        taken.listen()
        last = doctor.rendezvous("127.0.0.1", port)["checks"][-1]
        assert last["ok"] is False and "in use on this machine: pick another --master-port" in last["text"]
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")  # the environment when no flag is given
    monkeypatch.setenv("MASTER_PORT", str(port))
    r = doctor.rendezvous(None, None)
    assert (r["master_addr"], r["master_port"]) == ("127.0.0.1", port) and r["checks"][-1]["ok"] is True


def test_rendezvous_problems(monkeypatch):
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    monkeypatch.delenv("MASTER_PORT", raising=False)
    r = doctor.rendezvous("no-such-host.invalid", 29500)
    assert len(r["checks"]) == 1 and r["checks"][0]["ok"] is False and "does not resolve" in r["checks"][0]["text"]
    # TEST-NET-1 (RFC 5737) is never this machine: the port is asked over the network, however it answers
    last = doctor.rendezvous("192.0.2.1", 29500, timeout_s=0.5)["checks"][-1]
    assert "192.0.2.1 is not this machine" in last["text"]
    assert doctor.rendezvous(None, None)["checks"][0]["ok"] is None  # nothing given: says how to ask


def test_disk_free_under_output_and_checkpoint_warning(tmp_path):
    d = doctor.disk(str(tmp_path / "not" / "yet"), None)
    assert d["checked"] == str(tmp_path) and d["free_bytes"] > 0 and d["need_bytes"] is None and not d["warnings"]
    tiny = doctor.disk(str(tmp_path), "tiny")
    assert 0 < tiny["need_bytes"] < 2**30 and not tiny["warnings"]
    huge = doctor.disk(str(tmp_path), "llama-3.1-405b")  # 405B parameters x 46 bytes: about 17,000 GiB
    assert huge["need_bytes"] > 17_000 * 2**30
    assert bool(huge["warnings"]) == (huge["free_bytes"] < huge["need_bytes"])
    if huge["warnings"]:
        assert "llama-3.1-405b needs about" in huge["warnings"][0] and "--output" in huge["warnings"][0]


def test_doctor_cluster_section(in_process, tmp_path):
    port = _free_port()
    rc, out, err = in_process("doctor", "--json", "--master-addr", "127.0.0.1", "--master-port", port,
                              "--output", tmp_path / "run")
    assert rc == 0, err
    c = json.loads(out)["cluster"]
    assert c["rendezvous"]["master_port"] == port and all(x["ok"] for x in c["rendezvous"]["checks"])
    assert c["disk"]["checked"] == str(tmp_path) and "NCCL_SOCKET_IFNAME" in c["env"]["vars"]
    rc, out, _ = in_process("doctor", "--master-addr", "127.0.0.1", "--master-port", port, "--output", tmp_path)
    section = out[out.index("before a multi-node job:"):]
    assert rc == 0 and "NCCL: " in section and "NCCL_DEBUG" in section and "(not set)" in section
    assert f"[ok] rendezvous: port {port} is free on this machine" in section and "GiB free under" in section


def test_doctor_refuses_a_bad_port(in_process):
    rc, _, err = in_process("doctor", "--master-port", "70000")
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "--master-port" in err and "1..65535" in err
