"""The run's flags, built from the typed config: one flag per RunConfig field, its docstring as the help.

Cheap to import (pydantic and the standard library): `recipe` builds a command's flags and checks them before
the command's module, and torch with it, is imported, so --help and a bad flag answer in a fraction of a second.
"""
from __future__ import annotations

import argparse
from typing import Any, Literal, Optional, Union, get_args, get_origin

from shardlab.core.config import RunConfig, load_config


def add_run_arguments(parser: argparse.ArgumentParser, exclude: tuple[str, ...] = (),
                      hidden: tuple[str, ...] = ()) -> None:
    """--config and a flag per RunConfig field. exclude: fields the command has no flag for; hidden: fields it
    accepts (a `recipe run` command line works unchanged) but leaves out of --help, because they change nothing there."""
    parser.add_argument("--config", help="YAML file with the same fields as the flags; flags override it")
    for name, field in RunConfig.model_fields.items():
        if name in exclude:
            continue
        flag = "--" + name.replace("_", "-")
        help_ = argparse.SUPPRESS if name in hidden else f"{field.description} (default: {field.default})"
        metavar = _metavar(field.annotation)
        if name == "resume":  # `--resume` alone continues from the latest checkpoint
            parser.add_argument(flag, dest=name, default=argparse.SUPPRESS, nargs="?", const="latest", help=help_)
        elif field.annotation in (bool, Optional[bool]):
            parser.add_argument(flag, dest=name, default=argparse.SUPPRESS, action=argparse.BooleanOptionalAction, help=help_)
        else:
            parser.add_argument(flag, dest=name, default=argparse.SUPPRESS, metavar=metavar, help=help_)


def _metavar(annotation: Any) -> Optional[str]:
    """A field's values for --help: `{optimizer,all}` for a Literal (None allowed or not), `N|auto` for an int or a
    Literal, `NAME[,NAME...]` for a list (given comma-separated); None (argparse's NAME) otherwise."""
    args = [a for a in get_args(annotation) if a is not type(None)] if get_origin(annotation) is Union else [annotation]
    if any(get_origin(a) is list for a in args):
        return "NAME[,NAME...]"
    words = [str(v) for a in args if get_origin(a) is Literal for v in get_args(a)]
    if not words:
        return None
    if all(get_origin(a) is Literal for a in args):
        return "{" + ",".join(words) + "}"
    return "|".join(["N" if int in args else "F" if float in args else "VALUE", *words])


def run_config(args: argparse.Namespace) -> RunConfig:
    """The RunConfig the parsed flags and --config give; every problem at once, as a UserError naming the flags."""
    overrides = {k: v for k, v in vars(args).items() if k in RunConfig.model_fields}
    return load_config(getattr(args, "config", None), overrides)
