"""zero3_offload's `overlap-step` lever: the CPU's share of the optimizer step runs on a host thread beside the next
forward, each parameter's first read waiting only for its own sub-group.

At the selector's offload batch (llama-1b, 16 x 4 on one H100, R = 1) zero3_offload took 1.35x zero3's time per token:
0.60 s of a 2.33 s step is the host's work after backward, while the GPU idles (results/2026-12-07e-offload-batch.md).
The clip needs the global gradient norm, so none of it can start before backward ends; but the next step's forward
needs the new weights one decoder layer at a time, in the order the sub-groups hold them. Here DeepSpeed 0.19.8's
step (stage3.py `step`) runs as it does, except that for each sub-group stepped on the CPU the three parts that read
or write its fp32 state are queued instead of run: the clip's multiply (`unscale_and_clip_grads`), DeepSpeedCPUAdam's
update (`_optimizer_step`) and the copy of its weights to the GPU's 16-bit partition (`_reassign_or_swap_out_
partitioned_parameters`, gpu-cast's non-blocking copy). When the step returns, one host thread runs the queue in
sub-group order (DeepSpeedCPUAdam's kernel and the copies release the GIL), and marks each sub-group ready once its
copy is queued on the stream the step ran on. The forward reads every parameter through its module's `_parameters`
(DeepSpeed's ZeROOrderedDict; Liger's loss reads lm_head.weight that way too, outside lm_head's forward), and there a
parameter whose sub-group is not ready yet waits for it, so the kernels that read the weights are queued after the copy
that writes them. The values are DeepSpeed's to the bit: the same multiply by the same factor, the same AdamW call
with the hyperparameters of the moment the step was called (the schedule's lr steps right after the step; the thread
reads a copy of each group's), the same copy. Sub-groups stepped on the GPU (--offload-ratio below 1) run in the step.

Everything else that reads the weights or the optimizer's state waits for the whole queue (`settle`): the next step, the
next backward (its boundary writes the CPU gradients the queue reads), the optimizer's state_dict, DeepSpeed's
checkpoint, the export, the portable checkpoint, the end of training.

One rank only: on one rank ZeRO-3's fetch gathers nothing, it points each parameter at its partition (NoGatherHandle),
so the first read is in `_parameters`; on several the all-gather would read the partition before it. Needs gpu-cast
(its copies are the ones queued). On one H100 at the selector's offload batch (llama-1b, 16 x 4, R = 1; results/
2026-12-08-overlap-step.md), alternating in one call: 55,352 -> 57,460 tokens/s on the means (+3.8%; +2.5% without the
call's first run), and +2.3% on top of gpu-accum; the peak the same to the byte, losses within bf16 noise (predicted
+4-7%). After the first step 1-4 reads a step waited: the host no longer waits for the CPU's AdamW, but the copies to
the GPU run on the forward's stream, one after another with its kernels (`copy-stream` puts them on a stream of their
own: deepspeed_offload_copy_stream.py, not yet measured). Offered, not a default: one GPU only, and zero3_offload's
memory points not re-measured under it. On CPU processes the partitions are CPU memory and the copy runs in order, so
CI runs this code on one rank against the defaults' losses to the bit (tests/strategies/test_offload_overlap.py).
With SHARDLAB_TRACE set, each step notes how many sub-groups it queued (`zero3-offload-overlap N`), and each settle how
many parameter reads waited for one (`zero3-offload-overlap-waited N`: 0 means the thread was done first).
"""
from __future__ import annotations

import contextlib
import threading
import types
import weakref
from typing import Any, Optional

import torch

from shardlab.core import trace

GATE = "_shardlab_gate"  # on a parameter: its sub-group's _Gate
_LIVE: "weakref.WeakSet[_Queue]" = weakref.WeakSet()
_active = 0  # queues with work not yet settled: while 0, a parameter read does not look for GATE
_waited = 0  # reads that waited for a sub-group since the last settle (SHARDLAB_TRACE notes it)


class _Gate:
    """A sub-group between a step that queued its work and the first read of one of its parameters."""

    __slots__ = ("queue", "ready", "copied", "pending")

    def __init__(self, queue: "_Queue") -> None:
        self.queue = queue  # whose thread sets it (a read that waited on a failed thread raises its error)
        self.ready = threading.Event()  # set once the thread has queued the sub-group's copy
        self.ready.set()
        self.copied: Any = None  # copy-stream: the CUDA event after that copy, for the reading stream to wait for
        self.pending = False  # set when the step queues it; the first read (on the main thread) clears it


class _Queue:
    """One ZeRO-3 optimizer's deferred CPU work, the thread that runs it, and each sub-group's gate."""

    def __init__(self, zero) -> None:
        self.zero = weakref.proxy(zero)
        self.gates = [_Gate(self) for _ in zero.fp16_groups]
        self.side: Any = None  # copy-stream (deepspeed_offload_copy_stream.py): the CUDA stream the copies run on
        self.work: list[tuple[int, dict[str, Any]]] = []  # (sub-group, its param group's hyperparameters) in order
        self.factor: Any = None  # the clip's multiplier of this step (a CPU value)
        self.deferring = False
        self.thread: Optional[threading.Thread] = None
        self.error: Optional[BaseException] = None

    def start(self) -> None:
        global _active
        if not self.work:
            return
        stream = torch.cuda.current_stream() if torch.cuda.is_available() and self.on_gpu() else None
        if stream is not None and self.side is not None:
            self.side.wait_stream(stream)  # the copies overwrite weights that the queued backward may still read
            stream = self.side
        _active += 1
        self.thread = threading.Thread(target=self._run, args=(list(self.work), self.factor, stream),
                                       name="shardlab-overlap-step", daemon=True)
        self.work, self.factor = [], None
        self.thread.start()

    def on_gpu(self) -> bool:
        """Whether the 16-bit partitions the copies write are on a GPU."""
        flat = self.zero.fp16_partitioned_groups_flat
        return any(t is not None and t.device.type == "cuda" for t in flat)

    def _run(self, work, factor, stream) -> None:
        zero = self.zero
        try:
            if stream is not None:
                torch.cuda.set_device(stream.device)
            with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
                for sub_group, hyper in work:
                    fp32 = zero.fp32_partitioned_groups_flat[sub_group]
                    fp32.grad.mul_(factor)
                    _cpu_adam(zero.optimizer, fp32, hyper)
                    zero._reassign_or_swap_out_partitioned_parameters(sub_group)
                    gate = self.gates[sub_group]
                    if self.side is not None:
                        gate.copied = torch.cuda.Event()
                        gate.copied.record(self.side)
                    gate.ready.set()
        except BaseException as e:  # the waiting side raises it
            self.error = e
        finally:
            for gate in self.gates:
                gate.ready.set()

    def settle(self) -> None:
        """Wait for the queue's thread and its last copy; raise what the thread raised."""
        global _active, _waited
        thread, self.thread = self.thread, None
        if thread is None:
            return
        thread.join()
        _active -= 1
        if trace.enabled():
            trace.note(f"zero3-offload-overlap-waited {_waited}")
        _waited = 0
        copies, self.zero._shardlab_copies = self.zero._shardlab_copies, None
        if copies:
            copies.synchronize()  # the next step's AdamW writes what the copies read
        if self.side is not None:
            torch.cuda.current_stream().wait_stream(self.side)  # for the sub-groups no read has waited on
        for gate in self.gates:
            gate.pending, gate.copied = False, None
        if self.error is not None:
            error, self.error = self.error, None
            raise RuntimeError("overlap-step: the optimizer's CPU step failed on its thread") from error


def install(zero) -> int:
    """Queue the CPU sub-groups' step on this DeepSpeedZeroOptimizer_Stage3 instance (after gpu-cast's install).
    Returns how many sub-groups it can queue (those stepped on the CPU)."""
    if not zero.offload_optimizer or zero.swap_optimizer or not hasattr(zero, "_shardlab_copies"):
        raise RuntimeError("overlap-step needs ZeRO-3 optimizer offload to the CPU and gpu-cast installed before it")
    queue = zero._shardlab_overlap = _Queue(zero)
    _LIVE.add(queue)
    cpu = [i for i in range(len(zero.fp16_groups)) if _cpu_stepped(zero, i)]
    for i in cpu:
        for param in zero.fp16_groups[i]:
            setattr(param, GATE, queue.gates[i])
    zero.step = types.MethodType(_step, zero)
    zero.unscale_and_clip_grads = types.MethodType(_clip, zero)
    zero._optimizer_step = types.MethodType(_optimizer_step, zero)
    update = zero._reassign_or_swap_out_partitioned_parameters  # gpu-cast's copy
    zero._reassign_or_swap_out_partitioned_parameters = _deferring(zero, update)
    for name in ("backward_prologue", "state_dict", "load_state_dict"):
        setattr(zero, name, _settled_first(zero, getattr(zero, name)))
    _wait_on_read()
    return len(cpu)


def _cpu_stepped(zero, sub_group: int) -> bool:
    return zero.subgroup_to_device[sub_group] == "cpu" and not (
        zero.use_muon and zero.sub_groups_using_muon[sub_group])


def _step(self, closure=None):
    """DeepSpeed's step with the CPU sub-groups' work queued; the thread starts as it returns (gpu-cast's in-step
    state kept for the thread's copies until `settle`)."""
    queue = self._shardlab_overlap
    queue.settle()
    self._shardlab_copies = False
    queue.deferring = True
    try:
        result = type(self).step(self, closure)
    finally:
        queue.deferring = False
    if queue.work:
        if trace.enabled():
            trace.note(f"zero3-offload-overlap {len(queue.work)}")
        queue.start()
    else:
        self._shardlab_copies = None
    return result


def _clip(self, sub_group_id, total_norm):
    queue = self._shardlab_overlap
    if not (queue.deferring and _cpu_stepped(self, sub_group_id)):
        return type(self).unscale_and_clip_grads(self, sub_group_id, total_norm)
    if queue.factor is None:  # DeepSpeed's arithmetic (stage3.py unscale_and_clip_grads), the factor made a CPU value
        combined_scale = self.loss_scale
        if self.clip_grad > 0.:
            clip = ((total_norm / self.loss_scale) + 1e-6) / self.clip_grad
            clip = torch.clamp(clip, min=1.0)
            combined_scale = clip * self.loss_scale
        factor = 1. / combined_scale
        queue.factor = factor.cpu() if isinstance(factor, torch.Tensor) else factor


def _optimizer_step(self, sub_group_id):
    queue = self._shardlab_overlap
    if not (queue.deferring and _cpu_stepped(self, sub_group_id)):
        return type(self)._optimizer_step(self, sub_group_id)
    group = self.optimizer.param_groups[self.sub_group_to_group_id[sub_group_id]]
    gate = queue.gates[sub_group_id]
    gate.ready.clear()
    gate.copied, gate.pending = None, True
    queue.work.append((sub_group_id, {k: v for k, v in group.items() if k != "params"}))


def _deferring(zero, reassign):
    """The partition update: queued (run by the thread) for a deferred sub-group, else as it was."""
    def update(sub_group_id):
        queue = zero._shardlab_overlap
        if queue.deferring and _cpu_stepped(zero, sub_group_id):
            return None
        return reassign(sub_group_id)
    return update


def _cpu_adam(optimizer, p: torch.Tensor, group: dict[str, Any]) -> None:
    """DeepSpeedCPUAdam.step (deepspeed/ops/adam/cpu_adam.py) for one flat fp32 tensor, with `group`'s
    hyperparameters: the same state, the same kernel call."""
    if p.grad is None:
        return
    state = optimizer.state[p]
    if len(state) == 0:
        state["step"] = 0
        dtype = torch.float if optimizer.fp32_optimizer_states else p.dtype
        state["exp_avg"] = torch.zeros_like(p.data, dtype=dtype, device="cpu")
        state["exp_avg_sq"] = torch.zeros_like(p.data, dtype=dtype, device="cpu")
    state["step"] += 1
    beta1, beta2 = group["betas"]
    optimizer.ds_opt_adam.adam_update(optimizer.opt_id, state["step"], group["lr"], beta1, beta2, group["eps"],
                                      group["weight_decay"], group["bias_correction"], p.data, p.grad.data,
                                      state["exp_avg"], state["exp_avg_sq"])


def _settled_first(zero, method):
    def settled(*args, **kwargs):
        zero._shardlab_overlap.settle()
        return method(*args, **kwargs)
    return settled


def settle_all() -> None:
    """Wait for every queued CPU step in this process (before reading weights or optimizer state in bulk)."""
    for queue in list(_LIVE):
        queue.settle()


_patched = False


def _wait_on_read() -> None:
    """Make a parameter read through a module's `_parameters` wait for its sub-group's queued step (once a process)."""
    global _patched
    if _patched:
        return
    from deepspeed.runtime.zero.parameter_offload import ZeROOrderedDict

    read = ZeROOrderedDict.__getitem__

    def __getitem__(self, key):
        global _waited
        param = read(self, key)
        if _active and param is not None:
            gate = getattr(param, GATE, None)
            if gate is not None and gate.pending:
                if not gate.ready.is_set():
                    _waited += 1
                    gate.ready.wait()
                    if gate.queue.error is not None:
                        raise RuntimeError("overlap-step: the optimizer's CPU step failed on its thread") \
                            from gate.queue.error
                if gate.copied is not None:  # copy-stream: the kernels this read feeds run after the copy
                    torch.cuda.current_stream().wait_event(gate.copied)
                gate.pending = False
        return param

    ZeROOrderedDict.__getitem__ = __getitem__
    _patched = True
