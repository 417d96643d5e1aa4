"""What DeepSpeed shows on the console: the messages a user cannot act on silenced by their text; its long silent
wait, compiling CPU Adam on first use, announced; the op that training never uses (the shared-memory op of CPU
ranks) not built at all."""
from __future__ import annotations

import contextlib
import logging
import warnings
from pathlib import Path

# DeepSpeed's collectives call torch.distributed functions that torch 2.13 deprecates, one FutureWarning per call
# site and rank (24 in a 6-step zero3_offload run); Lightning tells every ZeRO-3 checkpoint that it is sharded
# (shardlab's portable copy and `recipe export` are the single-file forms).
for message in (r"`torch\.distributed\.all_gather_into_tensor` is deprecated",
                r"`torch\.distributed\.reduce_scatter_tensor` is deprecated",
                r"When saving the DeepSpeed Stage 3 checkpoint, each worker will save a shard"):
    warnings.filterwarnings("ignore", message=message)
# DeepSpeed's accelerator probe where torch sees no GPU (a CPU run asked for it; a GPU run is refused before, by
# shardlab's hardware probe), and Lightning's per-rank init line.
for logger, start in (("DeepSpeed", "Setting accelerator to CPU"),
                      ("lightning.pytorch.strategies.deepspeed", "initializing deepspeed distributed")):
    logging.getLogger(logger).addFilter(lambda record, start=start: not str(record.msg).startswith(start))

@contextlib.contextmanager
def without_shm_op():
    """Around DeepSpeed's init_distributed: on a CPU run it would compile its shared-memory op (deepspeed_shm_comm,
    about a minute on 2 cores the first time, then a 'built successfully' line per rank). That op serves only
    DeepSpeed's inference all-reduce (deepspeed/module_inject, tensor-parallel inference); ZeRO's collectives go
    through torch.distributed (gloo on CPU) with or without it, so training does not build it. On a GPU nothing
    changes: DeepSpeed has no such op there."""
    import importlib

    ds_torch = importlib.import_module("deepspeed.comm.torch")  # `from deepspeed.comm import torch` is torch itself

    build = ds_torch.build_shm_op
    ds_torch.build_shm_op = lambda: None
    try:
        yield
    finally:
        ds_torch.build_shm_op = build


def _needs_build(builder) -> bool:
    """The op will be compiled when it is loaded: it is neither installed with DeepSpeed nor compiled already in
    torch's extensions folder (where DeepSpeed's JIT build puts it: $TORCH_EXTENSIONS_DIR/NAME, else
    ~/.cache/torch_extensions/pyXY_cpu|cuXYZ/NAME)."""
    if builder is None:
        return False
    try:
        from deepspeed.git_version_info import installed_ops
        from torch.utils.cpp_extension import _get_build_directory

        if installed_ops.get(builder.name, False):
            return False
        return not any(Path(_get_build_directory(builder.name, verbose=False)).glob(f"{builder.name}*.so"))
    except Exception:  # a DeepSpeed or torch that keeps it elsewhere: say nothing rather than something wrong
        return False


def cpu_adam_built() -> bool:
    from deepspeed.ops.op_builder import CPUAdamBuilder

    return not _needs_build(CPUAdamBuilder())


CPU_ADAM_BUILD = ("shardlab: building DeepSpeed's CPU Adam (the cpu_adam op, for the optimizer step on the CPU): "
                  "once, about a minute; later runs reuse it")


def announce_cpu_adam_build(rank_zero: bool) -> None:
    if rank_zero and not cpu_adam_built():
        print(CPU_ADAM_BUILD, flush=True)
