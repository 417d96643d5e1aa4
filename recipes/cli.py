"""The `recipe` command: a name -> subcommand table; bad input is one line on stderr and exit code 2."""
from __future__ import annotations

import argparse
import sys
from typing import Callable, Optional

from shardlab.core.errors import RunFailed, UserError


def _strategies_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the registry as JSON")


def _run_parser(p: argparse.ArgumentParser) -> None:
    from shardlab.recipes.run import add_run_arguments

    add_run_arguments(p)


def _compare_parser(p: argparse.ArgumentParser) -> None:
    from shardlab.recipes.compare import add_compare_arguments

    add_compare_arguments(p)


def _compare(args: argparse.Namespace) -> int:
    from shardlab.recipes.compare import main

    return main(args)


def _plan_parser(p: argparse.ArgumentParser) -> None:
    from shardlab.recipes.plan import add_plan_arguments

    add_plan_arguments(p)


def _plan(args: argparse.Namespace) -> int:
    from shardlab.recipes.plan import main

    return main(args)


def _launch_parser(p: argparse.ArgumentParser) -> None:
    from shardlab.recipes.launch import add_launch_arguments

    add_launch_arguments(p)


def _launch(args: argparse.Namespace) -> int:
    from shardlab.recipes.launch import main

    return main(args)


def _export_parser(p: argparse.ArgumentParser) -> None:
    from shardlab.recipes.export_config import add_export_arguments

    add_export_arguments(p)


def _export(args: argparse.Namespace) -> int:
    from shardlab.recipes.export_config import main

    return main(args)


def _doctor_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def _doctor(args: argparse.Namespace) -> int:
    from shardlab.recipes.doctor import main

    return main(args)


def _run(args: argparse.Namespace) -> int:
    from shardlab.recipes.run import main

    return main(args)


def _strategies(args: argparse.Namespace) -> int:
    from shardlab.recipes.strategies_cmd import main

    return main(args)


# name -> (help, add arguments, run)
COMMANDS: dict[str, tuple[str, Callable, Callable[[argparse.Namespace], int]]] = {
    "run": ("train the Llama recipe under one strategy", _run_parser, _run),
    "export-config": ("write the DeepSpeed JSON or Accelerate YAML that reproduces a run", _export_parser, _export),
    "launch": ("start one run across nodes through torchrun or SLURM, after validating it", _launch_parser, _launch),
    "plan": ("estimate memory per strategy on given hardware and choose one, with reasons", _plan_parser, _plan),
    "compare": ("run several strategies from the same weights and batches; report parity", _compare_parser, _compare),
    "doctor": ("versions, which strategies run here, DeepSpeed ops, known-bad version combinations", _doctor_parser, _doctor),
    "strategies": ("list the registered strategy presets", _strategies_parser, _strategies),
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's usage dump -> our one line, exit 2
        raise UserError(message)


def main(argv: Optional[list[str]] = None) -> int:
    parser = _Parser(prog="recipe", description="shardlab: one Llama recipe, every sharding strategy")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, (help_, add, _) in COMMANDS.items():
        add(sub.add_parser(name, help=help_, description=help_))
    try:
        args = parser.parse_args(argv)
        return COMMANDS[args.command][2](args)
    except (UserError, RunFailed) as e:
        print(f"recipe: error: {e}", file=sys.stderr)
        return e.exit_code


if __name__ == "__main__":
    sys.exit(main())
