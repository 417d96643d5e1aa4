"""zero3_offload's `gpu-cast` lever: the CPU-stepped weights reach the GPU without a pageable copy.

After DeepSpeedCPUAdam steps a sub-group on the CPU, DeepSpeed 0.19.8 copies its fp32 weights into the GPU's 16-bit
partition with one blocking `copy_` (stage3.py `_reassign_or_swap_out_partitioned_parameters`). torch converts the dtype
of a blocking CPU-to-GPU copy on the CPU, into a temporary in pageable memory, then copies from pageable memory while
the host waits: on one H200 (llama-1b, micro-batch 8) 305 ms of a 1,403 ms step went to "Memcpy HtoD (Pageable ->
Device)" (results/2026-12-05b-offload-h200.md, SHARDLAB_PROFILE). Here the fp32 weights are copied from their pinned
buffer in chunks without waiting, and cast on the GPU (torch converts on the GPU for a non-blocking copy), so one
sub-group's copy runs while the CPU steps the next; the step returns once its last copy is done, as DeepSpeed's does.
fp32 to bf16 rounds to nearest even on either device: the same weights, bit for bit. GPU memory: one fp32 staging
chunk at a time (CHUNK), in the step, after backward has freed the activations; the estimate does not count it.
It measured slower than DeepSpeed's copy twice: on one H200 at R = 1 (results/2026-12-05d-h200.md) and on one H100 at
--offload-ratio 0.1 on top of gpu-grads (results/2026-12-06g-cast.md). Both runs copied from pageable memory: DeepSpeed
makes the fp32 weights with `.to("cpu", torch.float32).clone()` (stage3.py `_create_fp32_partitions`), never pinned, so
each chunk's "non-blocking" copy waited for the host and carried fp32, twice the bytes of DeepSpeed's 16-bit copy. So
install() page-locks those buffers where they are (cudaHostRegister: no new memory, no copy, the optimizer's tensors
unchanged; a buffer the driver refuses keeps the blocking copy). Then on one H200 (llama-1b, R = 1; results/
2026-12-07d-pinned-cast.md): micro-batch 8 12,054 -> 21,102 / 20,943 tokens/s, the selector's batch (32 x 2) 48,647 ->
59,460, the peak the same to the byte there. zero3_offload's default since (deepspeed_experiments.py).

The method replaced is DeepSpeed's private one, so the lever is refused under any DeepSpeed but 0.19.8
(deepspeed_experiments.py). On CPU processes both ends are in CPU memory: the same chunked copies, run in order, so CI
runs this code and checks its losses against DeepSpeed's own.
"""
from __future__ import annotations

import types
import weakref

import torch

from shardlab.core import trace

CHUNK = 1 << 26  # elements a copy: the fp32 staging on the GPU is 256 MiB at most


def install(zero) -> int:
    """Replace the 16-bit partition update and wrap the step on this DeepSpeedZeroOptimizer_Stage3 instance, and
    page-lock its CPU-stepped fp32 weights (on a GPU). Returns how many sub-groups' weights it page-locked."""
    zero._shardlab_copies = None  # inside a step: the event after its latest copy
    zero._reassign_or_swap_out_partitioned_parameters = types.MethodType(_copy_then_cast, zero)
    zero.step = types.MethodType(_step_then_wait, zero)
    pinned = page_lock([t for t in zero.fp32_partitioned_groups_flat if t is not None and t.device.type == "cpu"])
    if trace.enabled():
        trace.note(f"zero3-offload-gpu-cast-pinned {pinned}")
    return pinned


def page_lock(tensors: list[torch.Tensor]) -> int:
    """Page-lock each CPU tensor's memory in place (cudaHostRegister), so that a copy to the GPU from it runs without the
    host, until the tensor is freed. Without CUDA, or where the driver refuses (the memory stays pageable), it leaves
    the tensor as it is. Returns how many it page-locked."""
    if not torch.cuda.is_available():
        return 0
    cudart = torch.cuda.cudart()
    locked = 0
    for t in tensors:
        if t.is_pinned() or t.numel() == 0:
            continue
        if cudart.cudaHostRegister(t.data_ptr(), t.numel() * t.element_size(), 0) != cudart.cudaError.success:
            continue
        weakref.finalize(t, cudart.cudaHostUnregister, t.data_ptr())  # before the allocator can reuse the memory
        locked += 1
    return locked


def _copy_then_cast(self, sub_group_id):
    """The sub-group's 16-bit partition from its fp32 weights: pinned CPU memory to the GPU in chunks, cast there.
    Only inside the step (which waits for the copies before it returns); DeepSpeed's copy anywhere else (loading)."""
    dst = self.fp16_partitioned_groups_flat[sub_group_id]
    src = self.fp32_partitioned_groups_flat[sub_group_id]
    if self._shardlab_copies is None or dst is None or src.device.type != "cpu" or dst.numel() != src.numel() \
            or dst.data_ptr() == src.data_ptr():
        return type(self)._reassign_or_swap_out_partitioned_parameters(self, sub_group_id)
    to_gpu = dst.device.type != "cpu"
    flat_dst, flat_src = dst.data.view(-1), src.data.view(-1)
    for start in range(0, flat_src.numel(), CHUNK):
        end = min(start + CHUNK, flat_src.numel())
        flat_dst[start:end].copy_(flat_src[start:end], non_blocking=to_gpu and src.is_pinned())
    if to_gpu:
        self._shardlab_copies = torch.cuda.Event()
        self._shardlab_copies.record()
    self._unflatten_partitioned_parameters(sub_group_id)
    if trace.enabled():
        trace.note("zero3-offload-gpu-cast")


def _step_then_wait(self, closure=None):
    """DeepSpeed's step; before it returns, its copies are done (as DeepSpeed's blocking copies are): ZeRO-3 gathers
    parameters on streams of its own, and the next step's CPU Adam writes the buffers the copies read."""
    self._shardlab_copies = False  # in the step, no copy yet
    try:
        return type(self).step(self, closure)
    finally:
        if self._shardlab_copies:
            self._shardlab_copies.synchronize()
        self._shardlab_copies = None
