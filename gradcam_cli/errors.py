"""Exit codes and the few exception types that carry a user-facing message.

One place (the CLI's main) turns these into a single stderr line and a code,
so every module can fail with a sentence instead of a traceback.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import IntEnum

# How a message names an option: ⟨name⟩, ⟨name=value⟩, or ⟨name~⟩ ("the flag or the preset key").
# The library does not know whether a flag or a Python argument set it: the command line spells the
# mark as its flag (settings.as_flag), everything else as the argument (`spell_as_argument`).
OPTION_MARK = re.compile(r"⟨(\w+)(~|=[^⟩]*)?⟩")
Spelling = Callable[[str, str | None], str]  # (option name, "=value" / "~" / None) → words


def option(name: str, value: object = None) -> str:
    """The mark for an option in a message: `option("grid", "14x14")` → ⟨grid=14x14⟩."""
    return f"⟨{name}⟩" if value is None else f"⟨{name}={value}⟩"


def spell_as_argument(name: str, rest: str | None) -> str:
    """An option as the Python API names it: `grid`, `grid=14x14`."""
    return f"{name}{rest}" if rest and rest.startswith("=") else name


def spelled(text: str, spelling: Spelling = spell_as_argument) -> str:
    """A message with each option mark spelled for its reader."""
    return OPTION_MARK.sub(lambda m: spelling(m.group(1), m.group(2)), text)


def printable(text: str) -> str:
    """Control characters escaped, so a message stays on one line (a stray newline in a path or a preset)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def cut(text: str, limit: int = 80) -> str:
    """At most `limit` characters, '…' marking a cut: a message never prints a whole offending value."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def one_line(text: object, limit: int = 80) -> str:
    """Any text as one line of at most `limit` characters, runs of white space folded."""
    return cut(" ".join(str(text).split()), limit)


class ExitCode(IntEnum):
    OK = 0
    SOME_INPUTS_FAILED = 1
    USAGE = 2
    INTERNAL = 3
    INTERRUPTED = 130  # SIGINT (Ctrl-C)
    TERMINATED = 143  # SIGTERM


class GradcamError(Exception):
    """An error the user can fix: what was wrong, and (the hint) how to fix it, on one line.

    The one base class a Python caller catches; the command line prints
    `str(error)` as one stderr line and exits with `exit_code`.
    """

    exit_code: ExitCode = ExitCode.USAGE

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.spelled(spell_as_argument)

    def spelled(self, spelling: Spelling) -> str:
        """The message and hint with their option marks spelled for the reader (flags on the command line)."""
        return spelled(f"{self.message}; {self.hint}" if self.hint else self.message, spelling)


class UsageError(GradcamError, ValueError):
    """Bad options, unknown model or layer, bad config: nothing was run. Also a ValueError, as Python callers expect."""


class ModelError(GradcamError, ValueError):
    """The model could not be built or its weights could not be loaded."""


class InputError(GradcamError):
    """One input image could not be explained; the rest of a batch goes on."""

    exit_code = ExitCode.SOME_INPUTS_FAILED


class LayerError(GradcamError, ValueError):
    """A target layer is wrong for this model (missing, never ran, no gradient)."""


class LayoutError(GradcamError, ValueError):
    """A layer output whose spatial layout cannot be decided without `--grid`."""


class OutputError(GradcamError):
    """The output folder cannot be written (permissions, a full disk): the run stops, inputs untouched."""

    exit_code = ExitCode.SOME_INPUTS_FAILED


class Interrupted(GradcamError):
    """SIGINT or SIGTERM: the run stopped between images, every file written is complete."""

    def __init__(self, message: str, exit_code: ExitCode = ExitCode.INTERRUPTED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class Notice(UserWarning):
    """A choice the library made for the user where it had to guess (a fallback that fired): one line to say so.

    A Python caller sees it as a warning, its marks spelled as arguments; the
    command line (`warnings_said`) prints it as its one line, spelled as flags.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return spelled(self.message)

    def spelled(self, spelling: Spelling) -> str:
        return spelled(self.message, spelling)


def notify(message: str) -> None:
    """Say a Notice: where no one listens it is a Python warning, shown once per message."""
    warnings.warn(Notice(message), stacklevel=2)


def keep_marks(name: str, rest: str | None) -> str:
    """A spelling that leaves an option's mark as it is, for a reader that spells the marks itself (compare's flags)."""
    return f"⟨{name}{rest or ''}⟩"


@contextmanager
def warnings_said(say: Callable[[str], None], spelling: Spelling = spell_as_argument) -> Iterator[None]:
    """Inside, every warning goes to `say` as one line, once per text: a Notice spelled for its reader, any other
    (the user's model code, a library it calls) as `Category: message`, without the file path and source line
    Python's own format adds. Python's filters still decide which warnings are shown."""
    said: set[str] = set()

    def show(message: Warning | str, category: type[Warning], *_where: object, **_line: object) -> None:
        if isinstance(message, Notice):
            text = message.spelled(spelling)
        else:
            text = f"{category.__name__}: {printable(one_line(message, limit=400))}"  # lines folded, then controls escaped
        if text not in said:
            said.add(text)
            say(text)

    with warnings.catch_warnings():
        warnings.simplefilter("once", Notice)
        warnings.showwarning = show
        yield
