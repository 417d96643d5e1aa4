"""Errors that are the user's to fix: the CLI prints them as one line and exits with code 2."""


class UserError(Exception):
    """Bad input: the message names the field (as a flag) and the fix. Never a traceback."""

    exit_code = 2


class RunFailed(Exception):
    """A run that started but cannot finish correctly (diverged, export mismatch): one line, exit code 1."""

    exit_code = 1


class Interrupted(Exception):
    """Stopped by Ctrl-C (SIGINT): one line saying where the run got to and how to continue; exit code 130 (128 + 2)."""

    exit_code = 130
