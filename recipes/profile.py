"""Where a training step's time goes: torch.profiler over a few optimizer steps after the warm-up, summarised as
GPU busy time against wall time and kernel time by kind (matmul, attention, Triton/Liger, elementwise, optimizer,
copies, communication), and the GPU's idle time: its longest gaps, and its gaps summed by the host op running as each
began. A diagnostic, off by default: `SHARDLAB_PROFILE=PATH recipe run ...` writes PATH on
global rank 0 of a GPU run; benchmarks/hf_peer.py --profile PATH writes the same summary for the Trainer.
With SHARDLAB_PROFILE_PYTHON=1 the profiler also records Python calls (torch.profiler's with_stack), and the summary
lists the Python functions by their own host time: which code a host op's self time is spent in (DeepSpeed's hooks,
say). Recording them slows the host, so those runs' wall and idle times are not comparable with runs without."""
from __future__ import annotations

import bisect
import re
import time
from pathlib import Path

import lightning.pytorch as pl
import torch

# first match wins; names are CUDA kernel names (cuBLAS / CUTLASS / Triton / ATen)
KINDS = (
    ("communication", r"nccl|all_gather|reduce_scatter|allreduce"),
    ("attention", r"flash|fmha|attention|sdpa|cudnn.*(sdp|mha)"),
    ("copies", r"multi_tensor_apply.*CopyFunctor"),  # a foreach copy (fsdp's direct-cast), not the optimizer's
    ("optimizer", r"multi_tensor|adam|foreach|fused_adamw"),
    ("matmul", r"gemm|cutlass|xmma|nvjet|cublas|sm\d+_.*_tn|matmul"),
    ("triton (Liger, compile)", r"triton|liger|^_\w+$|^element_mul_kernel|poi_fused|red_fused|per_fused"),
    ("copies", r"memcpy|memset|copy_|CatArrayBatched|chunk_cat|split_with_sizes"),
    ("reduction", r"reduce_kernel|Reduce|norm_kernel|softmax|cross_entropy|nll"),
    ("elementwise", r"elementwise|vectorized|unrolled|Elementwise"),
)


def kind(name: str) -> str:
    for label, pattern in KINDS:
        if re.search(pattern, name, re.IGNORECASE):
            return label
    return "other"


def _device_us(e) -> float:
    return float(getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0) or 0)


def _python(key: str) -> bool:
    """A Python function's event under with_stack ("path/file.py(123): name"), not an op's."""
    return re.search(r"\.py\(\d+\): ", key) is not None or key.startswith("<built-in")


def summarize(prof, steps: int, wall_s: float, top: int = 40) -> str:
    """The profile of `steps` optimizer steps that took `wall_s` seconds: busy share, kinds, top kernels."""
    from torch.autograd import DeviceType

    # GPU ranges of annotations (Optimizer.step#AdamW.step, FSDP::pre_forward) span kernels counted on their own
    kernels = [e for e in prof.key_averages() if e.device_type == DeviceType.CUDA and _device_us(e) > 0
               and not getattr(e, "is_user_annotation", False) and "#" not in e.key and not e.key.startswith("FSDP::")]
    busy = sum(_device_us(e) for e in kernels) / 1e6
    lines = [f"steps profiled: {steps}; wall {wall_s / steps * 1e3:.1f} ms a step; GPU kernels {busy / steps * 1e3:.1f} ms "
             f"a step ({100 * busy / wall_s if wall_s else 0:.1f}% of wall; more than 100% where streams overlap)", ""]
    by_kind: dict[str, list[float]] = {}
    for e in kernels:
        entry = by_kind.setdefault(kind(e.key), [0.0, 0])
        entry[0] += _device_us(e)
        entry[1] += e.count
    lines.append(f"{'kind':<26}{'ms/step':>10}{'share':>8}{'launches/step':>15}")
    for label, (us, n) in sorted(by_kind.items(), key=lambda kv: -kv[1][0]):
        lines.append(f"{label:<26}{us / steps / 1e3:>10.2f}{100 * us / 1e6 / busy if busy else 0:>7.1f}%{n / steps:>15.0f}")
    lines += ["", f"top {top} kernels by device time", f"{'ms/step':>9}{'calls/step':>11}  kind / name"]
    for e in sorted(kernels, key=_device_us, reverse=True)[:top]:
        lines.append(f"{_device_us(e) / steps / 1e3:>9.2f}{e.count / steps:>11.0f}  {kind(e.key)} / {e.key[:150]}")
    cpu = sorted((e for e in prof.key_averages() if e.device_type == DeviceType.CPU), key=lambda e: -e.self_cpu_time_total)
    for title, rows in (("top 25 host ops by self CPU time", [e for e in cpu if not _python(e.key)]),
                        ("top 25 Python functions by self CPU time", [e for e in cpu if _python(e.key)])):
        if rows:
            lines += ["", title, f"{'ms/step':>9}{'calls/step':>11}  name"]
            lines += [f"{e.self_cpu_time_total / steps / 1e3:>9.2f}{e.count / steps:>11.0f}  {e.key[:150]}" for e in rows[:25]]
    events = prof.events()
    timed = [(e.time_range.start, e.time_range.end, e.name) for e in events if e.device_type == DeviceType.CUDA
             and not getattr(e, "is_user_annotation", False) and "#" not in e.name and not e.name.startswith("FSDP::")]
    host = [(e.time_range.start, e.time_range.end, e.name) for e in events if e.device_type == DeviceType.CPU]
    return "\n".join(lines + [""] + idle_gaps(timed, host, steps)) + "\n"


def idle_gaps(kernels: list[tuple[float, float, str]], host: list[tuple[float, float, str]], steps: int,
              top: int = 10) -> list[str]:
    """Where the device waited: the time between its kernels (all streams merged) from the first kernel to the last,
    and the longest gaps, each with the kernel before and after it and the innermost host op running as it began.
    `kernels` and `host`: (start_us, end_us, name)."""
    if not kernels:
        return ["device idle: no device kernels profiled"]
    kernels = sorted(kernels)
    gaps, end, before = [], kernels[0][1], kernels[0][2]
    for start, stop, name in kernels[1:]:
        if start > end:
            gaps.append((start - end, end, before, name))
        if stop > end:
            end, before = stop, name
    idle = sum(g[0] for g in gaps)
    lines = [f"device idle between kernels: {idle / steps / 1e3:.2f} ms a step in {len(gaps) / steps:.0f} gaps; "
             f"the longest {top}:", f"{'ms':>8}  kernel before -> kernel after  (host op as the gap began)"]
    starts = sorted(host)

    def running(at: float) -> str:  # the shortest host op spanning `at`: look back only as far as it could start
        best, length = "-", float("inf")
        for i in range(bisect.bisect_right(starts, (at, float("inf"), "")) - 1, -1, -1):
            begin, end, name = starts[i]
            if at - begin > length:
                break
            if end >= at and end - begin < length:
                best, length = name, end - begin
        return best

    named = [(length, at, prev, nxt, running(at)) for length, at, prev, nxt in gaps]
    for length, at, prev, nxt, op in sorted(named, reverse=True)[:top]:
        lines.append(f"{length / 1e3:>8.2f}  {prev[:60]} -> {nxt[:60]}  ({op[:60]})")
    # under cudaStreamSynchronize the host had caught up and waited: the gap is the device's own launch latency, or the
    # host's work right after the wait; under a Python region (Optimizer.step holds Lightning's closure) the host was
    # behind the device
    by_op: dict[str, list[float]] = {}
    for length, _, _, _, op in named:
        entry = by_op.setdefault(op, [0.0, 0])
        entry[0] += length
        entry[1] += 1
    lines += ["", "device idle by the host op running as each gap began", f"{'ms/step':>9}{'gaps/step':>10}  host op"]
    for op, (us, n) in sorted(by_op.items(), key=lambda kv: -kv[1][0])[:top]:
        lines.append(f"{us / steps / 1e3:>9.2f}{n / steps:>10.0f}  {op[:100]}")
    return lines


class StepWindow:
    """torch.profiler around optimizer steps [start, start + steps); `step_begin(n)` / `step_end(n)` with the number of
    optimizer steps done so far, from whatever loop runs them (Lightning here, the HF Trainer in benchmarks)."""

    def __init__(self, path: str, start: int = 6, steps: int = 3, python: bool = False) -> None:
        self.path, self.start, self.steps, self.python = Path(path), start, steps, python
        self.prof, self.t0, self.done = None, 0.0, False

    def step_begin(self, done_steps: int) -> None:
        if self.prof is None and not self.done and done_steps >= self.start:
            from torch.profiler import ProfilerActivity, profile

            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
            self.prof = profile(activities=activities, with_stack=self.python)
            self.prof.__enter__()
            self.t0 = time.perf_counter()

    def step_end(self, done_steps: int) -> None:
        if self.prof is not None and done_steps >= self.start + self.steps:
            self._close(done_steps)

    def finish(self, done_steps: int) -> None:
        """Training ended (after `done_steps` optimizer steps): a window still open is closed and summarised over the
        steps it covered; one that never opened says why. A profiler left running to the interpreter's exit aborted the
        process on the GPU machine ("corrupted size vs. prev_size", 2026-12-07e: 8 steps against steps 6..8's window)."""
        if self.prof is not None:
            self._close(done_steps, note=f"training ended after {done_steps} optimizer steps, inside the window "
                                         f"{self.start}..{self.start + self.steps - 1}")
        elif not self.done:
            self._write(f"nothing profiled: training ended after {done_steps} optimizer steps, before the window "
                        f"{self.start}..{self.start + self.steps - 1}; run at least {self.start + self.steps} steps\n")
            self.done = True

    def _close(self, done_steps: int, note: str = "") -> None:
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        wall = time.perf_counter() - self.t0
        self.prof.__exit__(None, None, None)
        steps = done_steps - self.start
        self._write((f"{note}\n" if note else "") + (summarize(self.prof, steps, wall) if steps > 0 else "no whole step profiled\n"))
        self.prof, self.done = None, True

    def _write(self, text: str) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(text)
        tmp.replace(self.path)


class StepProfile(pl.Callback):
    """Global rank 0: profiles optimizer steps 6..8 (after the warm-up) into a summary at `path`."""

    def __init__(self, path: str, python: bool = False) -> None:
        self.window = StepWindow(path, python=python)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_rank == 0:
            self.window.step_begin(trainer.global_step)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_rank == 0:
            self.window.step_end(trainer.global_step)

    def on_train_end(self, trainer, pl_module) -> None:
        if trainer.global_rank == 0:
            self.window.finish(trainer.global_step)
