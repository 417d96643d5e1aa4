"""The line a run shows while it trains, from global rank 0: step N/max, loss, validation loss, tokens/s, time left.

It replaces Lightning's progress bar, whose "Epoch 0/-2" says nothing in a run counted in steps (max_epochs=-1).
On a terminal the line is rewritten in place after every optimizer step; in a log or a pipe (`recipe compare`
reads the runs' output through one) a line is printed after the first step, then at most every INTERVAL_S
seconds, and after the last.
"""
from __future__ import annotations

import statistics
import sys
import time
from typing import Optional, TextIO

from lightning.pytorch.callbacks import ProgressBar

STEP = "shardlab: step "
# What `recipe compare` shows of each run's output: these progress lines, a one-off wait that a strategy
# announces ("shardlab: building ...", strategies/deepspeed_console.py) and the run's last line (recipes/run.py).
SHOWN_BY_COMPARE = (STEP, "shardlab: building ", "shardlab: loss ")
INTERVAL_S = 5.0


def is_progress(line: str) -> bool:
    return line.startswith(SHOWN_BY_COMPARE)


def duration(seconds: float) -> str:
    """12s, 3m05s, 2h07m."""
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def line(step: int, max_steps: int, loss: float, tokens_per_s: float, left_s: Optional[float],
         val: Optional[dict] = None) -> str:
    """val: the newest validation loss ({step, loss}), shown with its step when it is an earlier one."""
    left = "done" if step >= max_steps else f"{duration(left_s)} left" if left_s is not None else "time left unknown"
    shown = "" if val is None else f"  val {val['loss']:.4f}" + ("" if val["step"] == step else f" (step {val['step']})")
    return f"{STEP}{step}/{max_steps}  loss {loss:.4f}{shown}  {tokens_per_s:,.0f} tokens/s  {left}"


class StepProgress(ProgressBar):
    """Reads the StepRecorder (recipes/metrics.py), which runs before it: the global mean loss and the step times."""

    def __init__(self, recorder, interval_s: float = INTERVAL_S, stream: Optional[TextIO] = None) -> None:
        super().__init__()
        self.recorder, self.interval_s, self.stream = recorder, interval_s, stream
        self._enabled, self._shown, self._first, self._printed_at, self._open = True, -1, 0, -float("inf"), False

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def on_train_start(self, trainer, pl_module) -> None:
        self._first = self._shown = trainer.global_step  # a resumed run measures its own steps only

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step, r = trainer.global_step, self.recorder
        if not (self._enabled and trainer.is_global_zero) or step <= self._shown or len(r.losses) != step:
            return  # another rank, or still accumulating
        self._shown = step
        out = self.stream or sys.stdout
        tty, now, last = out.isatty(), time.monotonic(), step >= trainer.max_steps
        val = r.val_losses[-1] if r.val_losses else None
        validated = val is not None and val["step"] == step  # a validation step's line is always printed
        if not (tty or last or validated or step == self._first + 1 or now - self._printed_at >= self.interval_s):
            return
        self._printed_at = now
        times = r.step_s[self._first:]
        recent = statistics.median((times[1:] if len(times) > 1 else times)[-10:])  # the first step warms up
        ids = batch["input_ids"] if isinstance(batch, dict) else batch  # chat and instruction data: a dict
        tokens = ids.numel() * trainer.accumulate_grad_batches * trainer.world_size
        text = line(step, trainer.max_steps, r.losses[-1], tokens / recent, recent * (trainer.max_steps - step), val)
        if tty:
            out.write("\r" + text.ljust(79) + ("\n" if last else ""))
            self._open = not last
        else:
            out.write(text + "\n")
        out.flush()

    def on_train_end(self, trainer, pl_module) -> None:
        if self._open:  # stopped before max_steps on a terminal: end the line
            (self.stream or sys.stdout).write("\n")
            self._open = False
