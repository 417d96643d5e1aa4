"""What the run will have: probed where the run is, overridable to plan for a cluster elsewhere."""
from __future__ import annotations

import os
from typing import Optional

from pydantic import BaseModel, ConfigDict

from shardlab.core.errors import UserError

GiB = 2**30
MiB = 2**20


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity: a container's or SLURM's share, not the host's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def human_bytes(b: float) -> str:
    """Memory for people: GiB from 1 GiB up, MiB below (a tiny model's estimate is not "0.0 GiB")."""
    return f"{b / GiB:.1f} GiB" if b >= GiB else f"{b / MiB:.1f} MiB"


class Hardware(BaseModel):
    model_config = ConfigDict(frozen=True, use_attribute_docstrings=True)

    accelerator: str
    """`gpu` or `cpu`."""
    gpus_per_node: int
    """GPUs per node (0 on a CPU run)."""
    gpu_memory_bytes: int
    """Memory of one GPU."""
    bf16: bool
    """Whether the GPUs compute in bf16."""
    num_nodes: int
    """Nodes in the run."""
    cpu_memory_bytes: int
    """CPU memory of one node."""
    given: tuple[str, ...] = ()
    """Which of gpus, gpu_memory, cpu_memory were given rather than probed here."""

    @property
    def world_size(self) -> int:
        return max(self.gpus_per_node, 1) * self.num_nodes

    def describe(self) -> str:
        src = lambda what: "given" if what in self.given else "probed"
        if self.accelerator == "cpu":
            return f"CPU only, {self.num_nodes} node(s) with {self.cpu_memory_bytes / GiB:.0f} GiB ({src('cpu_memory')})"
        return (f"{self.num_nodes} node(s) x {self.gpus_per_node} GPU(s) ({src('gpus')}) of "
                f"{self.gpu_memory_bytes / GiB:.0f} GiB ({src('gpu_memory')}), "
                f"{self.cpu_memory_bytes / GiB:.0f} GiB CPU memory per node ({src('cpu_memory')})")


def _cpu_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _torch_cuda():
    import torch

    return torch.cuda


def _local_gpus() -> int:
    return _torch_cuda().device_count()


def probe(accelerator: str = "auto", num_nodes: int = 1, gpus: Optional[int] = None,
          gpu_memory_gib: Optional[float] = None, cpu_memory_gib: Optional[float] = None) -> Hardware:
    """The hardware here, with any of GPU count, GPU memory, nodes and CPU memory overridden."""
    # Ranges (memory > 0 and plausible, gpus >= 0, nodes >= 1) are RunConfig's field bounds: checked there.
    # GPUs here are counted (torch, seconds to import) only when the answer depends on them: a plan for GPUs
    # given with their memory, or a CPU run, never imports torch.
    local = _local_gpus() if accelerator != "cpu" and (gpus is None or gpu_memory_gib is None) else 0
    count = local if gpus is None else gpus
    if accelerator == "gpu" and count == 0:
        raise UserError("--accelerator gpu: no GPUs (0 visible and none given with --gpus); "
                        "use --gpus N --gpu-memory-gib M to plan for GPUs elsewhere, or --accelerator cpu")
    kind = "cpu" if accelerator == "cpu" or count == 0 else "gpu"
    if kind == "gpu" and gpu_memory_gib is None and local == 0:
        raise UserError("--gpus: no GPU here to measure; give --gpu-memory-gib too")
    gpu_mem = int(gpu_memory_gib * GiB) if gpu_memory_gib is not None else (
        _torch_cuda().get_device_properties(0).total_memory if local else 0)
    bf16 = (_torch_cuda().is_bf16_supported() if local and gpus is None else True) if kind == "gpu" else False
    return Hardware(accelerator=kind, gpus_per_node=count if kind == "gpu" else 0, gpu_memory_bytes=gpu_mem, bf16=bf16,
                    num_nodes=num_nodes,
                    cpu_memory_bytes=int(cpu_memory_gib * GiB) if cpu_memory_gib is not None else _cpu_memory(),
                    given=tuple(k for k, v in (("gpus", gpus), ("gpu_memory", gpu_memory_gib), ("cpu_memory", cpu_memory_gib))
                                if v is not None))
