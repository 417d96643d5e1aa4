"""`recipe doctor`: versions, which strategies can run here and why not, DeepSpeed ops, known-bad combinations,
and what a cluster user checks before a multi-node job (NCCL, network variables, the rendezvous, disk)."""
from __future__ import annotations

import argparse
import contextlib
import importlib.metadata as md
import json
import errno
import os
import platform
import shutil
import socket
import sys
from pathlib import Path
from typing import Any, Callable, Optional

from packaging.version import Version

PACKAGES = ["torch", "lightning", "transformers", "accelerate", "deepspeed", "pydantic", "liger-kernel", "torchao"]  # the last two: --kernels liger, --float8


def _version(name: str) -> Optional[str]:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def _torchvision_imports() -> bool:
    try:
        import torchvision  # noqa: F401
        return True
    except Exception:
        return False


# (what goes wrong, affected(versions) -> bool, what shardlab does, source: a public URL or a file of this repository)
KNOWN_BAD: list[tuple[str, Callable[[dict], bool], str, str]] = [
    ("Lightning's DeepSpeedStrategy divides the loss by accumulate_grad_batches and DeepSpeed's engine.backward "
     "divides it again: with clipping, ZeRO curves leave DDP's from the first clipped step",
     lambda v: bool(v["deepspeed"] and v["lightning"]) and Version(v["lightning"]) <= Version("2.6.6"),
     "worked around: shardlab's adapter calls backward(scale_wrt_gas=False)",
     "https://github.com/Lightning-AI/pytorch-lightning/issues/6170 (the loss scaled twice); shardlab's "
     "strategies/deepspeed_lightning.py (_LightningDeepSpeed.backward) and tests/strategies/test_parity.py (accumulation with "
     "clipping; lightning 2.6.6, deepspeed 0.19.8)"),
    ("Gradient accumulation over an epoch that is not a whole number of optimizer steps: Lightning steps DDP/FSDP on "
     "the epoch's last batch with a partial accumulation, and under DeepSpeed carries those micro-batches into the "
     "next step (a --grad-accum larger than an epoch never completes a step)",
     lambda v: bool(v["lightning"]) and Version(v["lightning"]) <= Version("2.6.6"),
     "worked around: shardlab cuts every epoch to whole optimizer steps (recipes/data.py GlobalBatchSampler)",
     "shardlab's benchmarks/results/2026-12-02-offload-and-ratios-h200.md (measured on one H200 and on CPU; "
     "lightning 2.6.6, deepspeed 0.19.8)"),
    ("Lightning refuses DeepSpeed on CPU ('only supported on CUDA GPUs') and passes device_rank=None to DeepSpeed",
     lambda v: bool(v["deepspeed"] and v["lightning"]) and Version(v["lightning"]) <= Version("2.6.6"),
     "worked around: shardlab's _LightningDeepSpeed subclass",
     "https://github.com/Lightning-AI/pytorch-lightning/pull/12699 (the CUDA-only check, from "
     "https://github.com/Lightning-AI/pytorch-lightning/issues/12607); shardlab's strategies/deepspeed_lightning.py "
     "(_LightningDeepSpeed)"),
    ("transformers 5 imported for the first time inside deepspeed.zero.Init fails (torch._dynamo signature mismatch)",
     lambda v: bool(v["deepspeed"] and v["transformers"]) and Version(v["transformers"]) >= Version("5"),
     "worked around: shardlab imports transformers before zero.Init",
     "shardlab's benchmarks/raw_lightning.py (its transformers import and the note beside it; torch 2.13.0, "
     "deepspeed 0.19.8, transformers 5.24.0)"),
    ("Lightning FSDPStrategy (FSDP1) on CPU: saving a full state dict with offload_to_cpu=True segfaults",
     lambda v: bool(v["lightning"] and v["torch"] and v["torch"].endswith("+cpu")),
     "not used: shardlab's fsdp is FSDP2 (ModelParallelStrategy)",
     "https://github.com/Lightning-AI/pytorch-lightning/issues/21804"),
    ("torchvision from PyPI beside a CPU wheel of torch fails to import ('operator torchvision::nms does not exist')",
     lambda v: bool(v["torch"] and v["torch"].endswith("+cpu") and _version("torchvision") and not _torchvision_imports()),
     "if affected: uninstall torchvision (shardlab does not use it), or install the torchvision release made for "
     "your torch from the same index as torch (https://download.pytorch.org/whl/cpu)",
     "https://github.com/pytorch/pytorch/issues/122494; the torch/torchvision version table: "
     "https://github.com/pytorch/vision#installation"),
]


def report(output: Optional[str] = None, master_addr: Optional[str] = None, master_port: Optional[int] = None,
           model: Optional[str] = None) -> dict[str, Any]:
    import torch

    from shardlab.core import registry

    versions = {"python": platform.python_version(), **{p: _version(p) for p in PACKAGES}}
    gpus = torch.cuda.device_count()
    cuda = {"cuda": torch.version.cuda or "none (CPU build of torch)",
            "nccl": nccl_version(),
            "gpus": [torch.cuda.get_device_name(i) for i in range(gpus)],
            "bf16": bool(gpus and torch.cuda.is_bf16_supported())}
    ops = _deepspeed_ops()
    strategies = {}
    for name, p in registry.presets().items():
        why = "needs a GPU" if gpus == 0 and not p.capabilities.cpu else p.build().why_not_here()
        strategies[name] = {"runs_here": why is None, "why_not": why,
                            "where": f"{gpus} GPU(s) over NCCL" if gpus else "CPU processes over gloo"}
    bad = [{"problem": text, "affected": affected(versions), "shardlab": fix, "source": src}
           for text, affected, fix, src in KNOWN_BAD]
    broken = registry.broken()
    return {"versions": versions, "accelerator": cuda, "deepspeed_ops": ops, "strategies": strategies,
            "known_bad": bad, "broken_plugins": broken,
            "cluster": {"env": network_env(), "rendezvous": rendezvous(master_addr, master_port),
                        "disk": disk(output, model)}}


def nccl_version() -> str:
    """The NCCL torch was built with (what GPU ranks talk over), or why it does not apply here."""
    import torch

    if not torch.version.cuda:
        return "not applicable (CPU build of torch: ranks talk over gloo)"
    if not torch.distributed.is_nccl_available():
        return "not applicable (this torch was built without NCCL)"
    v = torch.cuda.nccl.version()  # a tuple (2, 21, 5); an int such as 2708 before torch 1.13
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)


# The variables a multi-node run depends on: name -> what it does (NCCL's environment variables:
# https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html; torch.distributed's:
# https://pytorch.org/docs/stable/distributed.html#environment-variable-initialization).
NETWORK_ENV = {
    "MASTER_ADDR": "address of node 0, where the rendezvous listens (recipe launch sets it from --master-addr)",
    "MASTER_PORT": "TCP port of the rendezvous on node 0 (recipe launch sets it from --master-port)",
    "NCCL_SOCKET_IFNAME": "network interface(s) NCCL uses (prefix match; '^' excludes, '=' exact); unset: NCCL picks one",
    "GLOO_SOCKET_IFNAME": "network interface gloo uses (CPU runs, and torch's object collectives); exact name",
    "NCCL_IB_DISABLE": "1: InfiniBand/RoCE off, NCCL falls back to TCP sockets",
    "NCCL_IB_HCA": "which InfiniBand adapters NCCL uses",
    "NCCL_DEBUG": "INFO: NCCL logs the transport it picked per peer (set it for a first multi-node run)",
    "NCCL_P2P_DISABLE": "1: no NVLink/PCIe peer-to-peer between the GPUs of a node",
    "CUDA_VISIBLE_DEVICES": "the GPUs this process sees",
}


def network_env(environ: Optional[dict[str, str]] = None) -> dict[str, Any]:
    """Which of NETWORK_ENV are set, and whether the interfaces named in *_SOCKET_IFNAME exist on this machine."""
    env = os.environ if environ is None else environ
    interfaces = sorted(name for _, name in socket.if_nameindex())
    warnings = []
    for var in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        if env.get(var) and not _interface_matches(env[var], interfaces, prefix=var.startswith("NCCL")):
            warnings.append(f"{var}={env[var]} names no interface of this machine ({', '.join(interfaces)})")
    return {"vars": {name: {"value": env.get(name), "meaning": meaning} for name, meaning in NETWORK_ENV.items()},
            "interfaces": interfaces, "warnings": warnings}


def _interface_matches(spec: str, interfaces: list[str], prefix: bool) -> bool:
    """NCCL: comma-separated prefixes, '=' for exact names, a leading '^' excludes (then any other interface does)."""
    if spec.startswith("^"):
        return True
    exact = spec.startswith("=") or not prefix
    names = [n.strip() for n in spec.lstrip("=").split(",") if n.strip()]
    return any(i == n or (not exact and i.startswith(n)) for n in names for i in interfaces)


def rendezvous(addr: Optional[str], port: Optional[int], timeout_s: float = 2.0) -> dict[str, Any]:
    """Does node 0's address resolve, and is the port free there? --master-addr/--master-port, else MASTER_ADDR/PORT.

    A port is tested by binding it when the address is this machine's, else by connecting to it: refused means
    reachable with nothing listening (free); accepted means something listens (in use, or a rendezvous already up)."""
    addr = addr or os.environ.get("MASTER_ADDR")
    if port is None and os.environ.get("MASTER_PORT", "").isdigit():
        port = int(os.environ["MASTER_PORT"])
    checks: list[dict[str, Any]] = []
    out: dict[str, Any] = {"master_addr": addr, "master_port": port, "checks": checks}
    if not addr and port is None:
        checks.append({"ok": None, "text": "not checked: give --master-addr and --master-port (or set MASTER_ADDR, MASTER_PORT)"})
        return out
    ips: list[str] = []
    if addr:
        try:
            ips = sorted({info[4][0] for info in socket.getaddrinfo(addr, None, socket.AF_INET, socket.SOCK_STREAM)})
            checks.append({"ok": True, "text": f"{addr} resolves to {', '.join(ips)}"})
        except OSError as e:
            checks.append({"ok": False, "text": f"{addr} does not resolve ({e.strerror or e}): give node 0's address as "
                                                f"every node sees it (an IP, or a name in DNS or /etc/hosts)"})
            return out
    if port is None:
        checks.append({"ok": None, "text": "port not checked: give --master-port (or set MASTER_PORT)"})
        return out
    state = _port_state(ips[0] if ips else "0.0.0.0", port, timeout_s)
    checks.append({"ok": state in ("free", "free-remote"), "text": {
        "free": f"port {port} is free on this machine",
        "in-use": f"port {port} is in use on this machine: pick another --master-port",
        "privileged": f"port {port} needs root on this machine: pick a --master-port above 1023",
        "free-remote": f"{addr} is not this machine; it answers and nothing listens on port {port} (free)",
        "listening": f"{addr} is not this machine and something listens on port {port}: in use, or node 0's "
                     f"rendezvous is already up",
        "unreachable": f"{addr} is not this machine and did not answer on port {port} within {timeout_s:g} s "
                       f"(a firewall, or no route): run `recipe doctor` on node 0 to check the port there",
    }[state]})
    return out


def _port_state(ip: str, port: int, timeout_s: float) -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as torch's TCPStore: TIME_WAIT does not count
        try:
            s.bind((ip, port))
            return "free"
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                return "in-use"
            if e.errno == errno.EACCES:
                return "privileged"
            if e.errno != errno.EADDRNOTAVAIL:
                raise
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # not this machine's address: ask it
        s.settimeout(timeout_s)
        try:
            s.connect((ip, port))
            return "listening"
        except ConnectionRefusedError:
            return "free-remote"
        except OSError:
            return "unreachable"


# A checkpoint holds fp32 master weights and Adam's two fp32 states (12 bytes per parameter) and, under DeepSpeed,
# the 16-bit module weights (2): 14 at most in the native form, and the portable copy beside it (12 more,
# recipes/portable.py; none with --no-portable-checkpoints). A run keeps --keep-checkpoints (default 2) and writes the next before it
# deletes the oldest, then exports hf/ in fp32 (4 bytes per parameter).
CHECKPOINT_BYTES_PER_PARAM = 26
CHECKPOINTS_ON_DISK = 3
EXPORT_BYTES_PER_PARAM = 4


def disk(output: Optional[str], model: Optional[str]) -> dict[str, Any]:
    """Free space where --output (default runs/) will be; with --model, whether default checkpoints and hf/ fit."""
    target = Path(output or "runs").absolute()
    existing = next(p for p in (target, *target.parents) if p.exists())
    free = shutil.disk_usage(existing).free
    out: dict[str, Any] = {"output": str(target), "checked": str(existing), "free_bytes": free, "need_bytes": None,
                           "warnings": []}
    if model:
        from shardlab.core.memory import shape_of
        from shardlab.recipes.model import model_config

        params = shape_of(model_config(model)).params
        need = params * (CHECKPOINT_BYTES_PER_PARAM * CHECKPOINTS_ON_DISK + EXPORT_BYTES_PER_PARAM)
        out["need_bytes"] = need
        if free < need:
            out["warnings"].append(
                f"{free / 2**30:.1f} GiB free under {existing}, but {model} needs about {need / 2**30:.1f} GiB: "
                f"{CHECKPOINTS_ON_DISK} checkpoints of {CHECKPOINT_BYTES_PER_PARAM} bytes per parameter (--keep-checkpoints 2, "
                f"and the next one) and the fp32 hf/ export; point --output at a larger disk, or lower --keep-checkpoints")
    return out


def _deepspeed_ops() -> dict[str, bool]:
    try:
        from deepspeed.ops.op_builder.all_ops import ALL_OPS
    except Exception:
        return {}
    out = {}
    for name, builder in ALL_OPS.items():
        try:
            out[name] = bool(builder.is_compatible(verbose=False))
        except Exception:
            out[name] = False
    return out


def _port(value: str) -> int:
    if not value.isdigit() or not 1 <= int(value) <= 65535:
        raise argparse.ArgumentTypeError(f"{value!r}: give a TCP port, 1..65535")
    return int(value)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--output", help="the run's --output: free disk there (default runs/)")
    parser.add_argument("--model", help="the run's --model: warn when its checkpoints and hf/ would not fit under --output")
    parser.add_argument("--master-addr", help="node 0's address: check that it resolves (default $MASTER_ADDR)")
    parser.add_argument("--master-port", type=_port, help="the rendezvous port: check that it is free (default $MASTER_PORT)")


def main(args: argparse.Namespace) -> int:
    with contextlib.redirect_stdout(sys.stderr):  # DeepSpeed logs to stdout while it probes ops
        r = report(args.output, args.master_addr, args.master_port, args.model)
    if args.json:
        print(json.dumps(r, indent=2))
        return 0
    print("versions: " + ", ".join(f"{k} {v or 'not installed'}" for k, v in r["versions"].items()))
    a = r["accelerator"]
    print(f"accelerator: CUDA {a['cuda']}, NCCL {a['nccl']}, GPUs {a['gpus'] or 'none'}, bf16 {'yes' if a['bf16'] else 'no'}")
    print("deepspeed ops: " + (", ".join(f"{k} {'ok' if v else 'NO'}" for k, v in r["deepspeed_ops"].items()) or "deepspeed not importable"))
    print("strategies:")
    for name, s in r["strategies"].items():
        print(f"  {name:<18} {'runs here (' + s['where'] + ')' if s['runs_here'] else 'not here: ' + s['why_not']}")
    print("known-bad combinations:")
    for b in r["known_bad"]:
        print(f"  [{'affected' if b['affected'] else 'not affected'}] {b['problem']}\n      shardlab: {b['shardlab']}\n      source: {b['source']}")
    for name, err in r["broken_plugins"].items():
        print(f"broken plug-in {name}: {err}")
    _print_cluster(r["cluster"], a["nccl"])
    return 0


def _print_cluster(c: dict[str, Any], nccl: str) -> None:
    print("before a multi-node job:")
    print(f"  NCCL: {nccl}")
    env = c["env"]
    print(f"  environment (interfaces here: {', '.join(env['interfaces'])}):")
    for name, v in env["vars"].items():
        print(f"    {name:<21} {v['value'] if v['value'] is not None else '(not set)':<16} {v['meaning']}")
    for w in env["warnings"]:
        print(f"  [warning] {w}")
    for check in c["rendezvous"]["checks"]:
        print(f"  [{ {True: 'ok', False: 'problem', None: '-'}[check['ok']] }] rendezvous: {check['text']}")
    d = c["disk"]
    need = f", {d['need_bytes'] / 2**30:.1f} GiB needed" if d["need_bytes"] is not None else ""
    print(f"  [{'warning' if d['warnings'] else 'ok'}] disk: {d['free_bytes'] / 2**30:.1f} GiB free under {d['checked']}"
          f" (for --output {d['output']}){need}")
    for w in d["warnings"]:
        print(f"  [warning] {w}")
