"""A row of the option table (option_table.OPTIONS) as a typer parameter: how every command's shared options are declared.

explain takes the whole table, compare the part that means the same in a
comparison; either way an option's flags, help, default and checks are the
table's, so they cannot drift apart between commands.
"""

from __future__ import annotations

import inspect
from typing import Annotated, Any

import typer

from gradcam_cli.errors import GradcamError, UsageError, printable
from gradcam_cli.option_table import Option
from gradcam_cli.vocab import Method, closest, values


def parameter(option: Option) -> inspect.Parameter:
    """One option of the table as typer reads a parameter: its type and its click declaration."""
    if option.kind is list:
        kind: Any = list[str] | None
    elif option.kind in (bool, int, float):
        kind = option.kind if option.default is not None else option.kind | None
    else:
        kind = str | None if option.default is None else str
    if not option.flags:
        spec = typer.Argument(help=option.help, show_default=False, metavar=option.metavar)
    elif option.choices is not None:
        shown = option.metavar or f"<{'|'.join(option.choices)}>"
        spec = typer.Option(*option.flags, parser=choice_parser(option.flag, option.choices), metavar=shown, help=option.help)
    else:
        spec = typer.Option(*option.flags, help=option.help, show_default=option.default is not None, metavar=option.metavar or None)
    return inspect.Parameter(option.name, inspect.Parameter.KEYWORD_ONLY, default=option.default, annotation=Annotated[kind, spec])


class _UnknownChoice(GradcamError):
    """A flag's value outside its choices. Not a ValueError: click would wrap that in its own "Invalid value" words."""


def _unknown_choice(option: str, value: str, names: list[str]) -> GradcamError:
    close = closest(value, names)
    hint = f" (did you mean '{close}'?)" if close else ""
    return _UnknownChoice(f"{option} '{value}' is unknown; use one of {', '.join(names)}{hint}")


def choice_parser(option: str, names: Any) -> Any:
    """A parser for a fixed set of values; refuses with one plain line (typer's own says "Value error, ...")."""

    def parse(value: Any) -> str:
        text = str(getattr(value, "value", value))
        known = list(names)
        if text.strip().lower() in known:
            return text.strip().lower()
        raise _unknown_choice(option, text, known)

    return parse


def own_option(name: str, flag: str, default: Any, metavar: str, help_text: str, kind: Any = str) -> inspect.Parameter:
    """A command's own option, one that is not in the table (compare's --methods, eval's --metrics)."""
    spec = typer.Option(flag, help=help_text, metavar=metavar, show_default=default is not None)
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=Annotated[kind, spec])


def parse_names(text: str, flag: str, known: list[str]) -> list[str]:
    """`a, b,a` → the names, lowercased, each checked against `known` (with the closest one for a typo), each once."""
    names = [part.strip().lower() for part in text.split(",")]
    for name in names:
        if name not in known:
            close = closest(name, known)
            hint = f" (did you mean '{close}'?)" if close else ""
            raise UsageError(f"{flag} '{printable(name)}' is unknown; use some of {', '.join(known)}, comma-separated{hint}")
    return list(dict.fromkeys(names))


def parse_methods(text: str) -> list[str]:
    """`gradcam,gradcam++` → the method names, each checked, each once."""
    return parse_names(text, "--methods", values(Method))
