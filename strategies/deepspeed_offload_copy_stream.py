"""zero3_offload's `copy-stream` lever (with overlap-step): the copies of the CPU-stepped weights to the GPU on a CUDA
stream of their own, so that they run beside the next forward's kernels instead of between them.

Under overlap-step (deepspeed_offload_overlap.py) the host no longer waits for the CPU's AdamW: on one H100 at the
selector's offload batch only 1-4 parameter reads a step waited for the thread after the first step
(results/2026-12-08-overlap-step.md). But the thread queues gpu-cast's copies (the fp32 weights, 4 bytes a parameter:
4.4 GB a step for llama-1b) on the stream the forward runs on, so the GPU runs a sub-group's copy, then the forward's
kernels for those layers, then the next copy. Here the thread queues them on a stream of its own, which first waits for
the step's stream (the copies overwrite weights the queued backward may still read). After each sub-group's copy it
records an event, and the first read of one of the sub-group's parameters makes the reading stream wait for that event
(on the device, not the host). The settle (before the next step, the next backward, a checkpoint, the export) makes the
step's stream wait for the whole copy stream. Same copies, same values: the order on the device is all that changes.
Memory: gpu-cast's fp32 staging chunk (256 MiB at most) is allocated on the copy stream, beside the forward's
activations rather than after them.

Offered, not yet measured on a GPU; predicted on one H100 at the selector's offload batch: +2-5% over overlap-step
(the 4.4 GB crossing, about 0.1 s at PCIe 5's rate, under the forward). On CPU processes there is no stream: the lever
leaves the copies where overlap-step puts them (CI runs the rest of its path: the per-sub-group gate).
"""
from __future__ import annotations

import torch

from shardlab.core import trace


def install(zero) -> bool:
    """Give overlap-step's queue (installed before it) a CUDA stream for its copies, where the 16-bit partitions are
    on a GPU. Returns whether it did."""
    queue = getattr(zero, "_shardlab_overlap", None)
    if queue is None:
        raise RuntimeError("copy-stream needs overlap-step installed before it")
    on_gpu = torch.cuda.is_available() and queue.on_gpu()
    if on_gpu:
        queue.side = torch.cuda.Stream()
    if trace.enabled():
        trace.note(f"zero3-offload-copy-stream {int(on_gpu)}")
    return on_gpu
