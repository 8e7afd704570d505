"""The `gradcam` command: parses, validates, prints. No maths here.

Results go to stdout (JSON Lines when piped or with --json), everything for
humans (progress, warnings, errors) to stderr. `main` is the one place that
turns exceptions into a message and an exit code.
"""
from __future__ import annotations

import difflib
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Iterator, Optional, TextIO

import typer

from . import __version__
from .cams import Combine, Norm
from .errors import ExitCode, GradcamError, Interrupted, UsageError
from .images import DEFAULT_MAX_PIXELS, Colormap

INTERRUPTED_MESSAGE = (
    "interrupted by {signal}; every file written is complete; re-run with --skip-existing to do the rest"
)

app = typer.Typer(
    name="gradcam",
    help="Explain image classifiers: heat-map overlays of what a timm or torchvision model looks at.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@dataclass(frozen=True)
class Streams:
    """stdin/stdout/stderr and whether each is a terminal, passed as one object for tests."""

    stdin: TextIO
    stdout: TextIO
    stderr: TextIO

    @staticmethod
    def current() -> "Streams":
        return Streams(sys.stdin, sys.stdout, sys.stderr)

    @property
    def stdout_tty(self) -> bool:
        return bool(getattr(self.stdout, "isatty", lambda: False)())

    @property
    def stderr_tty(self) -> bool:
        return bool(getattr(self.stderr, "isatty", lambda: False)())

    def warn(self, message: str) -> None:
        print(f"gradcam: {message}", file=self.stderr, flush=True)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gradcam {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show the full traceback of an error.")] = False,
) -> None:
    """Explain image classifiers: heat-map overlays of what a timm or torchvision model looks at."""


# ------------------------------------------------------------------ explain

PRESET_PARAMS = (
    "model", "pretrained", "weights", "labels", "layers", "method", "classes", "topk", "crop",
    "colormap", "alpha", "save_raw", "batch_size", "device", "grid", "output_dir", "recursive",
    "relu", "norm", "combine", "eigen_smooth", "aug_smooth", "cam_batch_size", "save_guided", "precision", "workers",
    "max_pixels", "skip_existing",
)


def _merge_preset(ctx: typer.Context, given: dict[str, Any], config: Optional[Path]) -> dict[str, Any]:
    """Command-line values win; a preset fills what was left at its default."""
    if config is None:
        return given
    from .config import load_preset

    preset = load_preset(config)
    merged = dict(given)
    for name, value in preset.items():
        # compared by name: typer may ship its own copy of click's ParameterSource
        source = getattr(ctx.get_parameter_source(name), "name", "DEFAULT")
        if source not in ("COMMANDLINE", "ENVIRONMENT"):
            merged[name] = value
    return merged


def _choice(enum: Any, option: str, value: Any) -> Any:
    try:
        return enum(value)
    except ValueError:
        raise UsageError(f"{option} '{value}' is unknown; use one of {', '.join(c.value for c in enum)}") from None


def _at_least_one(option: str, value: Any) -> int:
    if int(value) < 1:
        raise UsageError(f"{option} {value}: must be 1 or more")
    return int(value)


def _settings(values: dict[str, Any]) -> Any:
    from .layout import parse_grid
    from .pipeline import ExplainSettings

    if not values.get("model"):
        raise UsageError("--model is required (or a --config preset that names one), e.g. --model resnet50")
    colormap = _choice(Colormap, "colormap", values["colormap"])
    alpha = float(values["alpha"])
    if not 0.0 <= alpha <= 1.0:
        raise UsageError(f"--alpha {alpha}: must be between 0 and 1")
    batch_size = _at_least_one("--batch-size", values["batch_size"])
    grid = values.get("grid")
    return ExplainSettings(
        model=str(values["model"]),
        pretrained=bool(values["pretrained"]),
        weights=Path(values["weights"]) if values.get("weights") else None,
        labels=Path(values["labels"]) if values.get("labels") else None,
        layers=tuple(values.get("layers") or ()),
        method=str(values["method"]),
        classes=tuple(values.get("classes") or ()),
        topk=int(values["topk"]),
        crop=bool(values["crop"]),
        colormap=colormap,
        alpha=alpha,
        save_raw=bool(values["save_raw"]),
        batch_size=batch_size,
        device=str(values["device"]),
        grid=parse_grid(grid) if grid else None,
        output_dir=Path(values["output_dir"]),
        recursive=bool(values["recursive"]),
        relu=bool(values["relu"]),
        norm=_choice(Norm, "--norm", values["norm"]),
        combine=_choice(Combine, "--combine", values["combine"]),
        eigen_smooth=bool(values["eigen_smooth"]),
        aug_smooth=bool(values["aug_smooth"]),
        cam_batch_size=_at_least_one("--cam-batch-size", values["cam_batch_size"]),
        save_guided=bool(values["save_guided"]),
        precision=str(values["precision"]),
        workers=max(0, int(values["workers"])),
        max_pixels=max(0, int(values["max_pixels"])),
        skip_existing=bool(values["skip_existing"]),
    )


def _human_line(record: Any) -> str:
    if not record.ok:
        return f"✗ {record.input}: {record.error}"
    name = f" {record.class_name}" if record.class_name else ""
    blank = "  (blank map)" if record.blank else ""
    return f"✓ {record.input} → {', '.join(record.outputs)}  class {record.class_index}{name} p={record.probability:.3f}{blank}"


@app.command(no_args_is_help=True)
def explain(
    ctx: typer.Context,
    inputs: Annotated[
        Optional[list[str]],
        typer.Argument(help="Images, folders, glob patterns, or - to read paths from stdin (one per line).", show_default=False),
    ] = None,
    model: Annotated[
        Optional[str],
        typer.Option("--model", "-m", help="timm name (tags and hf-hub:ORG/NAME work) or torchvision:ARCH.", show_default=False),
    ] = None,
    weights: Annotated[
        Optional[str], typer.Option("--weights", "-w", help="Local checkpoint (.safetensors, or .pth/.pt state dict).", show_default=False)
    ] = None,
    labels: Annotated[Optional[str], typer.Option("--labels", help="Class names, one per line.", show_default=False)] = None,
    pretrained: Annotated[
        bool, typer.Option("--pretrained/--no-pretrained", help="Load the hub's pretrained weights (ignored with --weights).")
    ] = True,
    layers: Annotated[
        Optional[list[str]],
        typer.Option("--layer", "-l", help="Target layer as a dotted path (negative indices count from the end); repeat to combine. Default: per model family.", show_default=False),
    ] = None,
    method: Annotated[str, typer.Option("--method", help="CAM method (see `gradcam methods`).")] = "gradcam",
    classes: Annotated[
        Optional[list[str]],
        typer.Option("--class", "-c", help="Class to explain, by index or name; repeat for several. Default: the top class.", show_default=False),
    ] = None,
    topk: Annotated[int, typer.Option("--topk", "-k", help="Explain the top K classes (one map each).", min=1)] = 1,
    crop: Annotated[
        bool, typer.Option("--crop/--whole", help="Use the model's centre crop (the map covers only that part), or the whole image (default).")
    ] = False,
    colormap: Annotated[Colormap, typer.Option("--colormap", help="Heat-map colours.")] = Colormap.jet,
    alpha: Annotated[float, typer.Option("--alpha", help="Heat-map opacity over the photo, 0 to 1.")] = 0.5,
    relu: Annotated[bool, typer.Option("--relu/--no-relu", help="Keep only positive evidence (default), or the signed map.")] = True,
    norm: Annotated[Norm, typer.Option("--norm", help="minmax: each map scaled to [0,1]; none: raw values (see --save-raw).")] = Norm.minmax,
    combine: Annotated[Combine, typer.Option("--combine", help="How the maps of several --layer are merged.")] = Combine.mean,
    eigen_smooth: Annotated[
        bool, typer.Option("--eigen-smooth", help="First principal component of the weighted activations instead of their sum.")
    ] = False,
    aug_smooth: Annotated[
        bool, typer.Option("--aug-smooth", help="Average the maps of 6 mirrored and zoomed views (6x the cost).")
    ] = False,
    cam_batch_size: Annotated[
        int, typer.Option("--cam-batch-size", help="Masked or ablated forwards per pass (scorecam, ablationcam).", min=1)
    ] = 32,
    save_raw: Annotated[
        bool, typer.Option("--save-raw", help="Also write the float32 map at the image's size as .npy (in [0,1] unless --norm none).")
    ] = False,
    save_guided: Annotated[
        bool, typer.Option("--save-guided", help="With --method guided-gradcam: also write the RGB guided image.")
    ] = False,
    output_dir: Annotated[str, typer.Option("--output-dir", "-o", help="Where overlays go; input sub-folders are mirrored.")] = "gradcam_out",
    recursive: Annotated[bool, typer.Option("--recursive", "-r", help="Scan folders recursively.")] = False,
    batch_size: Annotated[int, typer.Option("--batch-size", "-b", help="Images per forward pass.", min=1)] = 8,
    device: Annotated[str, typer.Option("--device", help="auto, cpu, cuda, cuda:N or mps.")] = "auto",
    precision: Annotated[
        str, typer.Option("--precision", help="auto (bf16 on CUDA, fp32 elsewhere), fp32, bf16 or fp16 for the model's passes; CAM maths stay fp32.")
    ] = "auto",
    skip_existing: Annotated[
        bool, typer.Option("--skip-existing", help="Skip images whose outputs are all there already (resume an interrupted run).")
    ] = False,
    max_pixels: Annotated[
        int, typer.Option("--max-pixels", help="Refuse images with more pixels than this (decompression bombs); 0 = no limit.", min=0)
    ] = DEFAULT_MAX_PIXELS,
    workers: Annotated[
        int, typer.Option("--workers", help="Threads decoding and writing images beside the model; 0 = automatic.", min=0)
    ] = 0,
    grid: Annotated[
        Optional[str], typer.Option("--grid", help="Token grid HxW when a layer's layout cannot be inferred.", show_default=False)
    ] = None,
    json_lines: Annotated[
        Optional[bool], typer.Option("--json/--no-json", help="JSON Lines records on stdout (default when stdout is not a terminal).", show_default=False)
    ] = None,
    config: Annotated[
        Optional[Path], typer.Option("--config", help="YAML run preset; command-line flags win.", show_default=False)
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress or summary on stderr.")] = False,
) -> int:
    """Write heat-map overlays showing what the model looks at for each image."""
    given = {name: value for name, value in locals().items() if name in PRESET_PARAMS}
    values = _merge_preset(ctx, given, config)
    if not inputs:
        raise UsageError("no input given; name images, folders, globs or - for paths on stdin")
    settings = _settings(values)
    return _run_explain(settings, inputs, Streams.current(), json_lines, quiet)


def _run_explain(settings: Any, inputs: list[str], streams: Streams, json_lines: Optional[bool], quiet: bool) -> int:
    from .pipeline import Explainer
    from .sources import iter_sources

    as_json = (not streams.stdout_tty) if json_lines is None else json_lines
    progress = _progress(streams, quiet)

    def emit(record: Any) -> None:
        # one write per line: a Ctrl-C between print's two writes would glue two JSON records together
        streams.stdout.write((record.to_json() if as_json else _human_line(record)) + "\n")
        streams.stdout.flush()
        if progress:
            progress.advance(record.ok)

    try:  # the progress line and the signal handling cover the model's loading too
        with _interruptible():
            explainer = Explainer(settings, warn=progress.warn if progress else streams.warn,
                                  progress=progress.detail if progress else None)
            for text in inputs:  # named files are known before any output is written
                if text != "-" and Path(text).is_file():
                    explainer.namer.protect(Path(text))
            sources = iter_sources(inputs, streams.stdin, settings.recursive, skip=settings.output_dir)
            summary = explainer.run(sources, emit)
    finally:
        if progress:
            progress.stop()
    return _finish(summary, settings, streams, quiet)


@contextmanager
def _interruptible() -> Iterator[None]:
    """Ctrl-C and SIGTERM stop the run (or the model's loading) with one message: exit 130 or 143.

    The engine finishes the files being written on its way out. KeyboardInterrupt
    is turned into our own error here because Typer would swallow it silently.
    """
    import signal
    import threading

    def stop(_signum: int, _frame: Any) -> None:
        raise Interrupted(INTERRUPTED_MESSAGE.format(signal="SIGTERM"), ExitCode.TERMINATED)

    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, stop) if main_thread else None
    try:
        yield
    except KeyboardInterrupt:
        raise Interrupted(INTERRUPTED_MESSAGE.format(signal="Ctrl-C")) from None
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)


def _finish(summary: Any, settings: Any, streams: Streams, quiet: bool) -> int:
    if summary.total == 0:
        streams.warn("no image found in the inputs (folders are scanned for image files; add -r to recurse)")
        return ExitCode.SOME_INPUTS_FAILED
    if not quiet:
        blank = f", {summary.blank} with a blank map" if summary.blank else ""
        failed = f", {summary.failed} failed" if summary.failed else ""
        skipped = f", {summary.skipped} skipped (outputs exist)" if summary.skipped else ""
        streams.warn(
            f"explained {summary.done} of {summary.total} images{skipped}{failed}{blank}; overlays in {settings.output_dir}/"
        )
    return ExitCode.SOME_INPUTS_FAILED if summary.failed else ExitCode.OK


class _Progress:
    """A rich progress line on stderr, only when stderr is a terminal."""

    def __init__(self, stderr: TextIO) -> None:
        from rich.console import Console
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.console = Console(file=stderr, stderr=True)
        self.bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=self.console, transient=True)
        self.task = self.bar.add_task("loading model", total=None)
        self.done = self.failed = 0
        self.bar.start()

    def advance(self, ok: bool) -> None:
        self.done += ok
        self.failed += not ok
        failed = f", {self.failed} failed" if self.failed else ""
        self.bar.update(self.task, description=f"explained {self.done}{failed}")

    def detail(self, what: str, done: int, total: int) -> None:
        """Long work inside one batch (masked forwards of scorecam/ablationcam)."""
        failed = f", {self.failed} failed" if self.failed else ""
        self.bar.update(self.task, description=f"explained {self.done}{failed}; {what}: {done}/{total} forwards")

    def warn(self, message: str) -> None:
        self.console.print(f"gradcam: {message}", markup=False, highlight=False)

    def stop(self) -> None:
        self.bar.stop()


def _progress(streams: Streams, quiet: bool) -> Optional[_Progress]:
    return _Progress(streams.stderr) if streams.stderr_tty and not quiet else None


# ------------------------------------------------------------------- layers

@app.command(no_args_is_help=True)
def layers(
    model: Annotated[str, typer.Argument(help="Model name as for explain (timm, hf-hub:, torchvision:).")],
    depth: Annotated[Optional[int], typer.Option("--depth", "-d", help="Show modules down to this depth.", min=0)] = None,
    filter_text: Annotated[Optional[str], typer.Option("--filter", "-f", help="Only modules whose name or type contains this.")] = None,
    json_lines: Annotated[bool, typer.Option("--json", help="One JSON record per module.")] = False,
) -> int:
    """Print the module tree with output shapes and layouts; the default target is marked."""
    from .layers import default_layer_paths, layer_rows, resolve_layers
    from .models import build_model, default_input_hw, num_prefix_tokens

    net, source, arch = build_model(model, pretrained=False)
    net.eval()
    defaults = [layer.name for layer in resolve_layers(net, default_layer_paths(net, arch, source), model)]
    input_hw = default_input_hw(net)
    rows = layer_rows(net, input_hw, defaults, num_prefix_tokens(net, source, arch))
    needle = (filter_text or "").lower()
    for row in rows:
        if depth is not None and row.depth > depth:
            continue
        if needle and needle not in row.name.lower() and needle not in row.type_name.lower():
            continue
        typer.echo(_layer_line(row, json_lines))
    if not json_lines:
        typer.echo(f"# input {input_hw[0]}x{input_hw[1]}; default target: {', '.join(defaults)} (marked *)", err=True)
    return ExitCode.OK


def _layer_line(row: Any, as_json: bool) -> str:
    import json

    if as_json:
        return json.dumps({"name": row.name, "type": row.type_name, "shape": row.shape, "layout": row.layout, "default": row.is_default})
    indent = "  " * max(row.depth - 1, 0)
    shape = "x".join(str(s) for s in row.shape) if row.shape else "-"
    mark = "*" if row.is_default else " "
    layout = f"  [{row.layout}]" if row.layout else ""
    return f"{mark} {indent}{row.name}  {row.type_name}  {shape}{layout}"


# ------------------------------------------------------------------ methods

@app.command()
def methods() -> int:
    """List the CAM methods: what each is good for and what it costs."""
    from .methods import METHODS

    width = max(len(name) for name in METHODS)
    for method in METHODS.values():
        typer.echo(f"{method.name:<{width}}  {method.summary} [{method.passes}]")
    return ExitCode.OK


# --------------------------------------------------------------------- main

def _usage_message(error: Any) -> str:
    message = error.format_message()
    if message.startswith("No such command") and "Did you mean" not in message:
        command = typer.main.get_command(app)
        names = list(getattr(command, "commands", {}))
        wrong = message.split("'")[1] if "'" in message else ""
        close = difflib.get_close_matches(wrong, names, n=1)
        if close:
            message += f" Did you mean '{close[0]}'?"
    return f"{message} (see: gradcam --help)"


def _is_click_error(error: BaseException) -> bool:
    """click's ClickException, whether from click itself or typer's bundled copy."""
    return callable(getattr(error, "format_message", None)) and hasattr(error, "exit_code")


def main(argv: Optional[list[str]] = None) -> None:
    """Entry point: run the app, map every outcome to one exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    command = typer.main.get_command(app)
    try:
        code = command.main(args=args, prog_name="gradcam", standalone_mode=False)
    except Interrupted as error:
        print(f"gradcam: {error}", file=sys.stderr)
        code = error.exit_code
    except GradcamError as error:
        if debug:
            raise
        print(f"gradcam: error: {error}", file=sys.stderr)
        code = error.exit_code
    except typer.Abort:  # Ctrl-C, as click reports it
        print(f"gradcam: {INTERRUPTED_MESSAGE.format(signal='Ctrl-C')}", file=sys.stderr)
        code = ExitCode.INTERRUPTED
    except KeyboardInterrupt:
        print(f"gradcam: {INTERRUPTED_MESSAGE.format(signal='Ctrl-C')}", file=sys.stderr)
        code = ExitCode.INTERRUPTED
    except BrokenPipeError:
        code = ExitCode.OK
    except Exception as error:  # noqa: BLE001 - click errors (maybe typer's bundled copy), then the last line of defence
        if debug:
            raise
        if _is_click_error(error):
            print(f"gradcam: error: {_usage_message(error)}", file=sys.stderr)
            code = ExitCode.USAGE
        else:
            print(f"gradcam: internal error: {type(error).__name__}: {error} (rerun with --debug for the traceback, and report it)", file=sys.stderr)
            code = ExitCode.INTERNAL
    sys.stdout.flush()
    sys.exit(int(code or 0))


if __name__ == "__main__":  # pragma: no cover
    main()
