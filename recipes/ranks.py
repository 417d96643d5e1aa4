"""One process per rank on this node for `recipe run`, through torch's elastic agent (torchrun's engine).

The agent starts the ranks, watches them, and as soon as one exits badly (an exception, a signal such
as kill -9 or the kernel's OOM killer) stops every other rank, which would otherwise wait in a
collective until the process-group timeout. Its failure report becomes one line naming the rank and
the cause. Each rank records an uncaught exception or a `recipe: error` message in the error file the
agent gives it (`record_failure`), so the cause is the rank's own words, not only an exit code.
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import uuid
import warnings

from shardlab.core.errors import RunFailed

LAUNCHED_ENV = "SHARDLAB_LOCAL_RANKS"  # set in the ranks this module starts


def launched_here() -> bool:
    """True inside a rank process: started by this module, by torchrun/`recipe launch`, or by SLURM."""
    return any(k in os.environ for k in (LAUNCHED_ENV, "TORCHELASTIC_RUN_ID", "LOCAL_RANK", "SLURM_PROCID"))


class _QuietInterrupt(logging.Filter):
    """Ctrl-C: the launcher says it in one line (recipes/interrupted.py), not also the agent's warning."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "death signal" not in str(record.msg)


_QUIET_INTERRUPT = _QuietInterrupt()


class DropMessages(logging.Filter):
    """Drops log records whose message starts with one of `prefixes`: what a library says that the user cannot act on."""

    def __init__(self, *prefixes: str) -> None:
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefixes)


# Lightning's info lines, by logger; each said by shardlab already or not actionable: the device probe ("GPU available:
# False", shardlab's announce names the devices), the litlogger advert, the process group's set-up per rank, the
# stop at max_steps (shardlab's last line).
_RANK_ZERO = DropMessages("GPU available:", "TPU available:", "HPU available:", "💡 Tip: For seamless cloud logging",
                          "`Trainer.fit` stopped: `max_steps=", "-" * 100 + "\ndistributed_backend=")
_LIGHTNING_INFO = {"lightning.pytorch.utilities.rank_zero": _RANK_ZERO, "lightning.fabric.utilities.rank_zero": _RANK_ZERO,
                   "lightning.fabric.utilities.distributed": DropMessages("Initializing distributed:"),
                   "lightning.pytorch.accelerators.cuda": DropMessages("LOCAL_RANK:"),
                   # torchao (--float8; transformers imports it wherever it is installed): its CUDA extensions a CPU
                   # build cannot load (float8 training does not use them), and torch on torchao's Enum registration
                   "torchao": DropMessages("Failed to load "),
                   "torch.utils._pytree": DropMessages("%s is an Enum subclass and is now natively supported")}
# Deprecations inside Lightning's own code (torch 2.13 deprecates what it calls): nothing a user can change.
_LIBRARY_DEPRECATIONS = (r"`isinstance\(treespec, LeafSpec\)` is deprecated",
                         r"torch\.distributed\.nn\.functional\.all_gather is deprecated")


def quiet_libraries() -> None:
    """Silence, by message, the library output a user cannot act on; warnings they can act on stay. Backend-specific
    messages are silenced by their adapter (strategies/deepspeed_console.py)."""
    for name, drop in _LIGHTNING_INFO.items():
        logging.getLogger(name).addFilter(drop)
    for message in _LIBRARY_DEPRECATIONS:
        warnings.filterwarnings("ignore", message=message)


quiet_libraries()  # on import: run.main imports this module first thing, in every process of `recipe run`


def run_ranks(nproc: int, argv: list[str]) -> None:
    """Run `recipe <argv>` in nproc local processes; raise RunFailed naming the first rank that failed, or
    KeyboardInterrupt on Ctrl-C once every rank has stopped."""
    from torch.distributed.elastic.multiprocessing import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    logging.getLogger("torch.distributed.elastic").setLevel(logging.ERROR)
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id=f"shardlab-{uuid.uuid4().hex[:8]}",
                          rdzv_backend="c10d", rdzv_endpoint="localhost:0", max_restarts=0, monitor_interval=0.5,
                          start_method="spawn", shutdown_timeout=10)
    logging.getLogger("torch.distributed.elastic.agent.server.api").addFilter(_QUIET_INTERRUPT)
    os.environ[LAUNCHED_ENV] = "1"  # inherited by the ranks
    threads = thread_env(nproc)
    os.environ.update(threads)
    previous = signal.getsignal(signal.SIGINT)
    try:
        elastic_launch(config, entrypoint=sys.executable)("-m", "shardlab.recipes.cli", *argv)
    except SignalException as e:  # the agent stopped every rank (SIGINT, then SIGKILL after shutdown_timeout)
        if e.sigval != signal.SIGINT:
            raise
        raise KeyboardInterrupt from None
    except ChildFailedError as e:
        if all(f.exitcode in (130, -signal.SIGINT) for f in e.failures.values()):  # Ctrl-C reached the ranks first
            raise KeyboardInterrupt from None
        raise RunFailed(describe_failure(e.failures, nproc)) from None
    finally:
        signal.signal(signal.SIGINT, previous)  # the agent's handler outlives it: Ctrl-C is a KeyboardInterrupt again
        os.environ.pop(LAUNCHED_ENV, None)
        for name in threads:
            os.environ.pop(name, None)


def rank_threads(nproc: int) -> int | None:
    """The CPU threads each of nproc local ranks computes with: this process's cores shared out (at least 1), as
    DeepSpeed's launcher does (torchrun sets 1), so that the ranks' thread pools do not oversubscribe the cores and
    spin against each other; None where OMP_NUM_THREADS is set already (the user's choice) or one rank has them all."""
    if nproc <= 1 or "OMP_NUM_THREADS" in os.environ:
        return None
    from shardlab.core.hardware import usable_cores

    return max(1, usable_cores() // nproc)


def thread_env(nproc: int) -> dict[str, str]:
    """rank_threads as what the ranks' environment adds: {"OMP_NUM_THREADS": "N"}, or {} where it stays as it is. For
    the ranks this module starts, those `recipe launch` starts through torchrun, and the benchmarks' raw Lightning."""
    threads = rank_threads(nproc)
    return {"OMP_NUM_THREADS": str(threads)} if threads else {}


_PEER_WORDS = ("connection closed", "connection reset", "broken pipe", "peer", "timed out", "timeout")


def describe_failure(failures: dict, nproc: int) -> str:
    """The agent's failures -> one line: the rank that failed first, and why.

    A rank that dies takes its peers down with it (their next collective fails, or the agent stops
    them with SIGTERM): the cause is a rank killed by another signal, else a rank's own error, before
    a peer's "connection closed" and before the agent's SIGTERM; the earliest within each kind."""
    def key(item):
        rank, f = item
        text, sig = str(f.message).lower(), f.signal_name()
        if sig in ("SIGTERM", "SIGINT"):  # how the agent stops the others: never the cause
            return (3, f.timestamp, rank)
        return (0 if sig != "<N/A>" else 2 if any(w in text for w in _PEER_WORDS) else 1, f.timestamp, rank)

    rank, f = min(failures.items(), key=key)
    if f.signal_name() != "<N/A>":
        cause = f"killed by {f.signal_name()} (exit code {f.exitcode})"
    else:
        message = f.message if isinstance(f.message, str) else f.message.get("message", "")
        lines = [l for l in message.strip().splitlines() if l.strip()]
        cause = lines[-1].strip() if lines and not message.startswith("To enable traceback") else f"exited with code {f.exitcode}"
    return f"rank {rank} of {nproc} failed: {cause}; shardlab stopped the other rank(s)"


def die_with_launcher() -> None:
    """In a rank this module started: if the launcher is killed (kill -9, preemption of the job's main
    process), the kernel kills this rank too (Linux PR_SET_PDEATHSIG), instead of training on orphaned."""
    if LAUNCHED_ENV not in os.environ or not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() == 1:  # the launcher died before the call above
        os._exit(1)


def record_failure(message: str) -> None:
    """In a rank started by the agent: leave this rank's cause where the agent reads it."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path or os.path.exists(path):
        return
    import json
    import time

    with open(path, "w") as f:
        json.dump({"message": {"message": message, "extraInfo": {"py_callstack": "", "timestamp": str(int(time.time()))}}}, f)


def finish_rank() -> None:
    """End a rank process whose work is done, once every rank is done: barrier, then `_exit_now(0)`.

    Interpreter teardown is skipped on purpose: gloo's threads were seen to abort finished FSDP2 ranks in it
    (SIGABRT, "terminate called without an active exception"; twice in clean-clone CI, once after a barrier
    and destroy_process_group), failing runs whose results were already written. Everything a run writes
    is written and closed before this."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()  # no rank leaves while another is still in a collective
    _exit_now(0)


def exit_failed_rank(message: str, code: int) -> None:
    """In a rank the agent started (it has an error file): `record_failure(message)`, then end with `code`, skipping
    the interpreter's teardown as finish_rank does (no barrier: the peers may be gone). In that teardown gloo's threads
    aborted a DDP rank whose export check had failed (clean-clone CI, 2026-12-06): the agent then saw SIGABRT and
    named it as the cause instead of the rank's own error. Elsewhere: returns."""
    if "TORCHELASTIC_ERROR_FILE" in os.environ:
        record_failure(message)
        _exit_now(code)


def _exit_now(code: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(code)
