"""The `recipe` command: a name -> subcommand table; bad input is one line on stderr and exit code 2.

Each subcommand lives in its own module of shardlab.recipes, with `add_arguments(parser)` and
`main(args) -> exit code`; modules are imported only when their command runs (torch imports take seconds).
A command whose module imports torch at its top (`run`) takes its flags from the typed config (recipes/flags.py),
checked before that module is imported: --help and a bad flag answer at once.
Ctrl-C is one line too, exit code 130 (128 + SIGINT).
"""
from __future__ import annotations

import argparse
import importlib
import sys
from typing import Optional

from shardlab.core.errors import Interrupted, RunFailed, UserError

# name -> (help, module in shardlab.recipes)
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("train the Llama recipe under one strategy", "run"),
    "plan": ("estimate memory per strategy on given hardware and choose one, with reasons", "plan"),
    "compare": ("run several strategies from the same weights and batches; report parity", "compare"),
    "launch": ("start one run across nodes through torchrun or SLURM, after validating it", "launch"),
    "export": ("write a Hugging Face folder from a checkpoint of any strategy and world size (CPU, no ranks)", "export_cmd"),
    "export-config": ("write the DeepSpeed JSON or Accelerate YAML that reproduces a run", "export_config"),
    "strategies": ("list the registered strategy presets", "strategies_cmd"),
    "models": ("list the shipped model shapes with their parameter counts", "models_cmd"),
    "doctor": ("versions, which strategies run here, DeepSpeed ops, known-bad version combinations", "doctor"),
}
# Commands whose flags are exactly the run config's: built by recipes/flags.py and validated before the command's
# module (and torch, Lightning, transformers with it) is imported.
RUN_CONFIG_FLAGS = ("run",)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's usage dump -> our one line, exit 2
        raise UserError(message)


def _module(command: str):
    return importlib.import_module(f"shardlab.recipes.{COMMANDS[command][1]}")


def main(argv: Optional[list[str]] = None) -> int:
    parser = _Parser(prog="recipe", description="shardlab: one Llama recipe, every sharding strategy")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    try:
        argv = sys.argv[1:] if argv is None else argv
        wanted = next((a for a in argv if not a.startswith("-")), None)
        for name, (help_, _) in COMMANDS.items():
            p = sub.add_parser(name, help=help_, description=help_)
            if name == wanted and name in RUN_CONFIG_FLAGS:
                from shardlab.recipes import flags

                flags.add_run_arguments(p)
            elif name == wanted:  # only the chosen command's module is imported to build its flags
                _module(name).add_arguments(p)
        args = parser.parse_args(argv)
        args.argv = list(argv)  # what `recipe run` hands to the rank processes it starts
        if args.command in RUN_CONFIG_FLAGS:
            from shardlab.recipes import flags

            flags.run_config(args)  # every bad flag reported before the slow import; the command reads them again
        from shardlab.recipes import ranks  # noqa: F401  (on import: library output no user can act on is dropped)

        return _module(args.command).main(args)
    except (UserError, RunFailed) as e:
        print(f"recipe: error: {e}", file=sys.stderr)
        from shardlab.recipes.ranks import exit_failed_rank

        exit_failed_rank(str(e), e.exit_code)  # a rank: recorded for its agent, ended before the interpreter's teardown
        return e.exit_code
    except Interrupted as e:  # Ctrl-C, once everything has stopped: where the run got to (recipes/interrupted.py)
        print(f"recipe: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:  # Ctrl-C anywhere else; a rank stays quiet: its launcher says it
        from shardlab.recipes.ranks import launched_here

        if not launched_here():
            print("recipe: interrupted", file=sys.stderr)
        return Interrupted.exit_code
    except BaseException as e:  # a crash: the traceback goes to stderr; the agent gets its last line
        if not isinstance(e, SystemExit):
            from shardlab.recipes.ranks import record_failure

            record_failure(f"{type(e).__name__}: {e}".splitlines()[0])  # a no-op outside a rank the agent started
        raise


if __name__ == "__main__":
    sys.exit(main())
