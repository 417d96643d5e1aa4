"""Where the expensive once-per-run steps happened: with SHARDLAB_TRACE=FILE set, each appends one line
`EVENT PID` (resolve, tokenise). Tests count them: a 2-rank run resolves and tokenises once, in the launcher."""
from __future__ import annotations

import os


def note(event: str) -> None:
    path = os.environ.get("SHARDLAB_TRACE")
    if path:
        with open(path, "a") as f:
            f.write(f"{event} {os.getpid()}\n")
