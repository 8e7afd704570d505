"""The `gradcam` app: its commands, and `main`, the one place that turns every outcome into a message and an exit code.

Results go to stdout (JSON Lines when piped or with --json), everything for
humans (progress, warnings, errors) to stderr, through the `Streams` given to
`main`. No maths here; each command lives in its own module.
"""

from __future__ import annotations

import difflib
from dataclasses import replace
import gc
import os
import sys
from typing import Annotated, Any

import typer

from gradcam_cli.version import __version__
from gradcam_cli.cli.console import StdoutClosed, Streams, write_line
from gradcam_cli.cli.compare import compare
from gradcam_cli.cli.eval import evaluate
from gradcam_cli.cli.explain import command_streams, explain
from gradcam_cli.cli.inspect import layers, methods
from gradcam_cli.cli.report import report
from gradcam_cli.cli.signals import interrupted
from gradcam_cli.errors import ExitCode, GradcamError, Interrupted, warnings_said
from gradcam_cli.option_words import as_flag
from gradcam_cli.timings import stamp

STDOUT_CLOSED = 141  # 128 + SIGPIPE: what a shell reports for `yes | head -1`; the run stopped before the end

app = typer.Typer(
    name="gradcam",
    help="Explain image classifiers: heat-map overlays of what a timm or torchvision model looks at.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(ctx: typer.Context, value: bool) -> None:
    if value:
        write_line(command_streams(ctx).stdout, f"gradcam {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show the full traceback of an error.")] = False,
) -> None:
    """Explain image classifiers: heat-map overlays of what a timm or torchvision model looks at."""


app.command(no_args_is_help=True)(explain)
app.command(no_args_is_help=True)(compare)
app.command("eval", no_args_is_help=True)(evaluate)
app.command(no_args_is_help=True)(layers)
app.command()(methods)
app.command(no_args_is_help=True)(report)


# --------------------------------------------------------------------- main


def _usage_message(error: Any, args: list[str]) -> str:
    """click's usage error as one line that names the help to read (`gradcam explain --help` for its options)."""
    kind = type(error).__name__
    if kind == "NoArgsIsHelpError":  # a bare `gradcam` or `gradcam layers`: the help is the message
        return str(error.format_message())
    message = str(error.format_message()).replace("Value error, ", "")  # a validator's residue in typer's wording
    if kind == "NoSuchOption":
        message = _no_such_option(error)
    elif message.startswith("No such command") and "Did you mean" not in message:
        names = list(getattr(typer.main.get_command(app), "commands", {}))
        wrong = message.split("'")[1] if "'" in message else ""
        close = difflib.get_close_matches(wrong, names, n=1)
        if close:
            message += f" Did you mean '{close[0]}'?"
    return f"gradcam: error: {message} (see: {_command_path(error, args)} --help)"


def _no_such_option(error: Any) -> str:
    """One suggestion, the closest, instead of click's list of possible options."""
    name = str(getattr(error, "option_name", "") or "")
    close = difflib.get_close_matches(name, list(getattr(error, "possibilities", None) or []), n=1, cutoff=0.0)
    return f"No such option: {name}" + (f". Did you mean {close[0]}?" if close else "")


def _command_path(error: Any, args: list[str]) -> str:
    """`gradcam explain` for an error in explain's options; from the arguments when click gives no context."""
    path = getattr(getattr(error, "ctx", None), "command_path", None)
    if path:
        return str(path)
    names = getattr(typer.main.get_command(app), "commands", {})
    first = next((arg for arg in args if not arg.startswith("-")), None)
    return f"gradcam {first}" if first in names else "gradcam"


def _is_click_error(error: BaseException) -> bool:
    """click's ClickException, whether from click itself or typer's bundled copy."""
    return callable(getattr(error, "format_message", None)) and hasattr(error, "exit_code")


def _stdout_gone() -> int:
    """The reader of stdout went away: stop quietly with 128 + SIGPIPE, as Unix tools do.

    stdout is pointed at /dev/null so that the interpreter's last flush of what
    is still buffered cannot fail (the recipe in Python's `signal` docs).
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (AttributeError, OSError, ValueError):  # not a real file (tests): nothing will be flushed
        pass
    return STDOUT_CLOSED


def main(argv: list[str] | None = None, streams: Streams | None = None) -> None:
    """Entry point: run the app, map every outcome to one exit code; errors are one line on `streams.stderr`."""
    stamp("interpreter")
    args = list(sys.argv[1:] if argv is None else argv)
    streams = replace(streams or Streams.current(), command=("gradcam", *args))
    stderr = streams.stderr
    debug = "--debug" in args
    command = typer.main.get_command(app)
    try:
        with warnings_said(lambda line: print(f"gradcam: {line}", file=stderr), as_flag):  # the library's fallbacks, one line each
            code = command.main(args=args, prog_name="gradcam", standalone_mode=False, obj=streams)
    except Interrupted as error:
        print(f"gradcam: {error.spelled(as_flag)}", file=stderr)
        code = error.exit_code
    except GradcamError as error:
        if debug:
            raise
        print(f"gradcam: error: {error.spelled(as_flag)}", file=stderr)
        code = error.exit_code
    except (typer.Abort, KeyboardInterrupt):  # Ctrl-C outside a run, as click or Python report it
        print(f"gradcam: {interrupted()}", file=stderr)
        code = ExitCode.INTERRUPTED
    except (StdoutClosed, BrokenPipeError):
        code = _stdout_gone()
    except Exception as error:  # noqa: BLE001 - click errors (maybe typer's bundled copy), then the last line of defence
        if debug:
            raise
        if _is_click_error(error):
            print(_usage_message(error, args), file=stderr)
            code = ExitCode.USAGE
        else:
            print(
                f"gradcam: internal error: {type(error).__name__}: {error} (rerun with --debug for the traceback, and report it)",
                file=stderr,
            )
            code = ExitCode.INTERNAL
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        code = _stdout_gone()
    stamp("finished")
    if argv is None:  # this process is the command, not a caller's test or script
        _skip_the_last_collections()
    sys.exit(int(code or 0))


def _skip_the_last_collections() -> None:
    """Python's last garbage collections walk every object torch and timm made, half a second of a one-image run;
    the process ends right after, and every file was closed already (records go through raw descriptors, pictures
    through atomic writes), so those objects are left to be freed with it."""
    gc.freeze()


if __name__ == "__main__":  # pragma: no cover
    main()
