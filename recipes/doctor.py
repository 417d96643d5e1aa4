"""`recipe doctor`: versions, which strategies can run here and why not, DeepSpeed ops, known-bad combinations."""
from __future__ import annotations

import argparse
import contextlib
import importlib.metadata as md
import json
import platform
import sys
from typing import Any, Callable, Optional

from packaging.version import Version

PACKAGES = ["torch", "lightning", "transformers", "accelerate", "deepspeed", "pydantic"]


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


# (what goes wrong, affected(versions) -> bool, what shardlab does, source)
KNOWN_BAD: list[tuple[str, Callable[[dict], bool], str, str]] = [
    ("Lightning's DeepSpeedStrategy divides the loss by accumulate_grad_batches and DeepSpeed's engine.backward "
     "divides it again: with clipping, ZeRO curves leave DDP's from the first clipped step",
     lambda v: bool(v["deepspeed"] and v["lightning"]) and Version(v["lightning"]) <= Version("2.6.6"),
     "worked around: shardlab's adapter calls backward(scale_wrt_gas=False)",
     "shardlab measurement, tests/strategies/test_parity.py::test_grad_accum_with_clipping_matches_ddp (lightning 2.6.6, deepspeed 0.19.8)"),
    ("Gradient accumulation over an epoch that is not a whole number of optimizer steps: Lightning steps DDP/FSDP on "
     "the epoch's last batch with a partial accumulation, and under DeepSpeed carries those micro-batches into the "
     "next step (a --grad-accum larger than an epoch never completes a step)",
     lambda v: bool(v["lightning"]) and Version(v["lightning"]) <= Version("2.6.6"),
     "worked around: shardlab cuts every epoch to whole optimizer steps (recipes/data.py GlobalBatchSampler)",
     "shardlab measurement on one H200 and on CPU, benchmarks/results/2026-12-02-offload-and-ratios-h200.md (lightning 2.6.6, deepspeed 0.19.8)"),
    ("Lightning refuses DeepSpeed on CPU ('only supported on CUDA GPUs') and passes device_rank=None to DeepSpeed",
     lambda v: bool(v["deepspeed"] and v["lightning"]) and Version(v["lightning"]) <= Version("2.6.6"),
     "worked around: shardlab's _LightningDeepSpeed subclass",
     "../shared/BACKEND_FACTS.md, measured 2026-12-02 (lightning 2.6.6, deepspeed 0.19.8)"),
    ("transformers 5 imported for the first time inside deepspeed.zero.Init fails (torch._dynamo signature mismatch)",
     lambda v: bool(v["deepspeed"] and v["transformers"]) and Version(v["transformers"]) >= Version("5"),
     "worked around: shardlab imports transformers before zero.Init",
     "../shared/BACKEND_FACTS.md, measured 2026-12-02 (torch 2.13.0, deepspeed 0.19.8, transformers 5.24.0)"),
    ("Lightning FSDPStrategy (FSDP1) on CPU: saving a full state dict with offload_to_cpu=True segfaults",
     lambda v: bool(v["lightning"] and v["torch"] and v["torch"].endswith("+cpu")),
     "not used: shardlab's fsdp is FSDP2 (ModelParallelStrategy)",
     "../shared/BACKEND_FACTS.md, measured 2026-12-02 (torch 2.13.0+cpu, lightning 2.6.6)"),
    ("torchvision from PyPI beside the torch 2.13.0 CPU wheel fails to import ('operator torchvision::nms does not exist')",
     lambda v: bool(v["torch"] and v["torch"].endswith("+cpu") and _version("torchvision") and not _torchvision_imports()),
     "if affected: uninstall torchvision, or install torch 2.14.1 with torchvision 0.29.1",
     "this workplace's machine notes (env/machines/python.md)"),
]


def report() -> dict[str, Any]:
    import torch

    from shardlab.core import registry

    versions = {"python": platform.python_version(), **{p: _version(p) for p in PACKAGES}}
    gpus = torch.cuda.device_count()
    cuda = {"cuda": torch.version.cuda or "none (CPU build of torch)",
            "nccl": ".".join(map(str, torch.cuda.nccl.version())) if gpus and torch.distributed.is_nccl_available() else "none",
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
            "known_bad": bad, "broken_plugins": broken}


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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def main(args: argparse.Namespace) -> int:
    with contextlib.redirect_stdout(sys.stderr):  # DeepSpeed logs to stdout while it probes ops
        r = report()
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
    return 0
