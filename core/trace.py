"""Where the expensive once-per-run steps happened: with SHARDLAB_TRACE=FILE set, each appends one line
`EVENT PID` (resolve, tokenise; forward-with-gradients, a forward that finds the previous step's gradients still
live). Tests count them: a 2-rank run resolves and tokenises once, in the launcher, and frees gradients after each step."""
from __future__ import annotations

import os


def enabled() -> bool:
    return bool(os.environ.get("SHARDLAB_TRACE"))


def note(event: str) -> None:
    path = os.environ.get("SHARDLAB_TRACE")
    if path:
        with open(path, "a") as f:
            f.write(f"{event} {os.getpid()}\n")
