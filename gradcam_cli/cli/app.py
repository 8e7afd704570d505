"""The `gradcam` command: parses, validates, prints. No maths here.

Results go to stdout (JSON Lines when piped or with --json), everything for
humans (progress, warnings, errors) to stderr. `main` is the one place that
turns exceptions into a message and an exit code.
"""
from __future__ import annotations

import difflib
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TextIO
from collections.abc import Iterator

import typer

from gradcam_cli import __version__
from gradcam_cli.maps import Combine, Norm
from gradcam_cli.errors import ExitCode, GradcamError, Interrupted, UsageError, printable
from gradcam_cli.cli.signals import StopRequests, interrupted
from gradcam_cli.outputs.images import DEFAULT_MAX_PIXELS, Colormap

STDOUT_CLOSED = 141  # 128 + SIGPIPE: what a shell reports for `yes | head -1`; the run stopped before the end

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
    def current() -> Streams:
        return Streams(sys.stdin, sys.stdout, sys.stderr)

    @property
    def stdout_tty(self) -> bool:
        return bool(getattr(self.stdout, "isatty", lambda: False)())

    @property
    def stderr_tty(self) -> bool:
        return bool(getattr(self.stderr, "isatty", lambda: False)())

    def warn(self, message: str) -> None:
        try:
            print(f"gradcam: {message}", file=self.stderr, flush=True)
        except BrokenPipeError:  # nobody reads stderr any more; never let that fail an image (warn runs in workers)
            pass


class _StdoutClosed(Exception):
    """The reader of stdout went away (`| head`). Not an OSError: typer and click turn EPIPE into a bare exit 1."""


def _write_line(stream: TextIO, text: str) -> None:
    """One write per line: a Ctrl-C between print's two writes would glue two JSON records together."""
    try:
        stream.write(text + "\n")
        stream.flush()
    except BrokenPipeError:
        raise _StdoutClosed() from None


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


def _merge_preset(ctx: typer.Context, given: dict[str, Any], config: Path | None) -> dict[str, Any]:
    """Command-line values win; a preset fills what was left at its default."""
    if config is None:
        return given
    from gradcam_cli.cli.presets import load_preset

    preset = load_preset(config)
    merged = dict(given)
    for name, value in preset.items():
        # compared by name: typer may ship its own copy of click's ParameterSource
        source = getattr(ctx.get_parameter_source(name), "name", "DEFAULT")
        if source not in ("COMMANDLINE", "ENVIRONMENT"):
            merged[name] = value
    return merged


def _named(option: str) -> str:
    """How a message names an option that may come from a flag or a preset: `--max-pixels (preset key max_pixels)`."""
    return f"{option} (preset key {option.lstrip('-').replace('-', '_')})"


def _choice(enum: Any, option: str, value: Any) -> Any:
    """A preset's choice value (flags are checked as they are parsed, by `_choice_parser`)."""
    try:
        return enum(value)
    except ValueError:
        raise UsageError(
            f"{_named(option)} '{value}' is unknown; use one of {', '.join(c.value for c in enum)}"
        ) from None


def _at_least(option: str, value: Any, minimum: int, meaning: str = "") -> int:
    """The one range check of a whole-number option, whether it came from a flag or a preset key."""
    if int(value) < minimum:
        raise UsageError(f"{_named(option)} {value}: must be {minimum} or more{meaning}")
    return int(value)


def _settings(values: dict[str, Any]) -> Any:
    from gradcam_cli.layout import parse_grid
    from gradcam_cli.run.pipeline import ExplainSettings

    if not values.get("model"):
        raise UsageError("--model is required (or a --config preset that names one), e.g. --model resnet50")
    colormap = _choice(Colormap, "--colormap", values["colormap"])
    alpha = float(values["alpha"])
    if not 0.0 <= alpha <= 1.0:
        raise UsageError(f"--alpha {alpha}: must be between 0 and 1")
    batch_size = _at_least("--batch-size", values["batch_size"], 1)
    grid = values.get("grid")
    return ExplainSettings(
        model=str(values["model"]),
        pretrained=bool(values["pretrained"]),
        weights=Path(values["weights"]) if values.get("weights") else None,
        labels=Path(values["labels"]) if values.get("labels") else None,
        layers=tuple(values.get("layers") or ()),
        method=str(values["method"]),
        classes=tuple(values.get("classes") or ()),
        topk=_at_least("--topk", values["topk"], 1),
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
        cam_batch_size=_at_least("--cam-batch-size", values["cam_batch_size"], 1),
        save_guided=bool(values["save_guided"]),
        precision=str(values["precision"]),
        workers=_at_least("--workers", values["workers"], 0, " (0 = automatic)"),
        max_pixels=_at_least("--max-pixels", values["max_pixels"], 0, " (0 turns the decompression-bomb guard off)"),
        skip_existing=bool(values["skip_existing"]),
    )


def _human_line(record: Any) -> str:
    """One line per image on a terminal: done, skipped (outputs there) or failed (the path once)."""
    if record.skipped:
        return f"↷ {record.input}: skipped, outputs exist ({', '.join(record.outputs)})"
    if not record.ok:
        error = record.error or "failed"
        return f"✗ {error}" if _names_input(error, record.input) else f"✗ {record.input}: {error}"
    name = f" {record.class_name}" if record.class_name else ""
    probability = f" p={record.probability:.3f}" if record.probability is not None else ""
    return f"✓ {record.input} → {', '.join(record.outputs)}  class {record.class_index}{name}{probability}{_blank_note(record)}"


def _blank_note(record: Any) -> str:
    """A blank map on the image's own line: which class, when several were explained, and what to try."""
    blanks = [str(target.class_index) for target in record.blank_targets()]
    if not blanks:
        return ""
    which = f" for class {', '.join(blanks)}" if len(record.targets) > 1 else ""
    return f"  (blank map{which}: try another --layer or --class)"


def _names_input(error: str, input_path: str) -> bool:
    """Whether an error message already starts with its input (the engine's do, maybe shortened to `…`)."""
    head = error.split(": ", 1)[0]
    if head == input_path or (head.endswith("…") and input_path.startswith(head[:-1])):
        return True
    try:
        return Path(head) == Path(input_path)
    except (TypeError, ValueError):
        return False


def _unknown_choice(option: str, value: str, names: list[str]) -> UsageError:
    close = difflib.get_close_matches(value, names, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return UsageError(f"{option} '{value}' is unknown; use one of {', '.join(names)}{hint}")


def _choice_parser(option: str, names: Any) -> Any:
    """A parser for a fixed set of values; refuses with one plain line (typer's own says "Value error, ...").

    `names` is the list of values, or a function giving them (imported only when the option is used).
    """
    def parse(value: Any) -> str:
        text = str(getattr(value, "value", value))
        known = list(names() if callable(names) else names)
        if text.strip().lower() in known:
            return text.strip().lower()
        raise _unknown_choice(option, text, known)

    return parse


def _enum_option(enum: Any, option: str, help_text: str) -> Any:
    names = [member.value for member in enum]
    return typer.Option(option, parser=_choice_parser(option, names), metavar=f"<{'|'.join(names)}>", help=help_text)


def _method_names() -> list[str]:
    from gradcam_cli.cams.methods import method_names

    return method_names()


def _precisions() -> tuple[str, ...]:
    from gradcam_cli.model.load import PRECISIONS

    return PRECISIONS


@app.command(no_args_is_help=True)
def explain(
    ctx: typer.Context,
    inputs: Annotated[
        list[str] | None,
        typer.Argument(help="Images, folders, glob patterns, or - to read paths from stdin (one per line).", show_default=False),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option("--model", "-m", help="timm name (tags and hf-hub:ORG/NAME work) or torchvision:ARCH.", show_default=False),
    ] = None,
    weights: Annotated[
        str | None, typer.Option("--weights", "-w", help="Local checkpoint (.safetensors, or .pth/.pt state dict).", show_default=False)
    ] = None,
    labels: Annotated[str | None, typer.Option("--labels", help="Class names, one per line.", show_default=False)] = None,
    pretrained: Annotated[
        bool, typer.Option("--pretrained/--no-pretrained", help="Load the hub's pretrained weights (ignored with --weights).")
    ] = True,
    layers: Annotated[
        list[str] | None,
        typer.Option("--layer", "-l", show_default=False, help="Target layer as a dotted path (negative indices count "
                     "from the end); repeat to combine. Default: per model family."),
    ] = None,
    method: Annotated[
        str, typer.Option("--method", parser=_choice_parser("--method", _method_names), help="CAM method (see `gradcam methods`).")
    ] = "gradcam",
    classes: Annotated[
        list[str] | None,
        typer.Option("--class", "-c", show_default=False,
                     help="Class to explain, by index or name; repeat for several. Default: the top class."),
    ] = None,
    topk: Annotated[int, typer.Option("--topk", "-k", help="Explain the top K classes (one map each).")] = 1,
    crop: Annotated[
        bool, typer.Option("--crop/--whole",
                           help="Use the model's centre crop (the map covers only that part), or the whole image (default).")
    ] = False,
    colormap: Annotated[str, _enum_option(Colormap, "--colormap", "Heat-map colours.")] = Colormap.jet.value,
    alpha: Annotated[float, typer.Option("--alpha", help="Heat-map opacity over the photo, 0 to 1.")] = 0.5,
    relu: Annotated[bool, typer.Option("--relu/--no-relu", help="Keep only positive evidence (default), or the signed map.")] = True,
    norm: Annotated[
        str, _enum_option(Norm, "--norm", "minmax: each map scaled to [0,1]; none: raw values (see --save-raw).")
    ] = Norm.minmax.value,
    combine: Annotated[str, _enum_option(Combine, "--combine", "How the maps of several --layer are merged.")] = Combine.mean.value,
    eigen_smooth: Annotated[
        bool, typer.Option("--eigen-smooth", help="First principal component of the weighted activations instead of their sum.")
    ] = False,
    aug_smooth: Annotated[
        bool, typer.Option("--aug-smooth", help="Average the maps of 6 mirrored and zoomed views (6x the cost).")
    ] = False,
    cam_batch_size: Annotated[
        int, typer.Option("--cam-batch-size", help="Masked or ablated forwards per pass (scorecam, ablationcam).")
    ] = 32,
    save_raw: Annotated[
        bool, typer.Option("--save-raw", help="Also write the float32 map at the image's size as .npy (in [0,1] unless --norm none).")
    ] = False,
    save_guided: Annotated[
        bool, typer.Option("--save-guided", help="With --method guided-gradcam: also write the RGB guided image.")
    ] = False,
    output_dir: Annotated[
        str, typer.Option("--output-dir", "-o", help="Where overlays go; input sub-folders are mirrored.")
    ] = "gradcam_out",
    recursive: Annotated[bool, typer.Option("--recursive", "-r", help="Scan folders recursively.")] = False,
    batch_size: Annotated[int, typer.Option("--batch-size", "-b", help="Images per forward pass.")] = 8,
    device: Annotated[str, typer.Option("--device", help="auto, cpu, cuda, cuda:N or mps.")] = "auto",
    precision: Annotated[
        str, typer.Option("--precision", parser=_choice_parser("--precision", _precisions), metavar="<auto|fp32|bf16|fp16>",
                          help="auto (bf16 on CUDA, fp32 elsewhere), fp32, bf16 or fp16 for the model's passes; CAM maths stay fp32.")
    ] = "auto",
    skip_existing: Annotated[
        bool, typer.Option("--skip-existing", help="Skip images whose outputs are all there already (resume an interrupted run).")
    ] = False,
    max_pixels: Annotated[
        int, typer.Option("--max-pixels", help="Refuse images with more pixels than this (decompression bombs); 0 = no limit.")
    ] = DEFAULT_MAX_PIXELS,
    workers: Annotated[
        int, typer.Option("--workers", help="Threads decoding and writing images beside the model; 0 = automatic.")
    ] = 0,
    grid: Annotated[
        str | None, typer.Option("--grid", help="Token grid HxW when a layer's layout cannot be inferred.", show_default=False)
    ] = None,
    json_lines: Annotated[
        bool | None, typer.Option("--json/--no-json", show_default=False,
                                  help="JSON Lines records on stdout (default when stdout is not a terminal).")
    ] = None,
    config: Annotated[
        Path | None, typer.Option("--config", help="YAML run preset; command-line flags win.", show_default=False)
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


def _run_explain(settings: Any, inputs: list[str], streams: Streams, json_lines: bool | None, quiet: bool) -> int:
    """Named inputs checked first (no model load when none holds an image), then the run, reported as it goes."""
    from gradcam_cli.run.pipeline import Explainer
    from gradcam_cli.inputs.sources import named_files

    as_json = (not streams.stdout_tty) if json_lines is None else json_lines
    with StopRequests() as stops:  # the signal handling and the progress line cover the model's loading too
        scan = _scan_named(inputs, streams, settings) if "-" not in inputs else None
        if scan is not None and not scan.images:
            return _nothing_to_explain(scan, _Reporter(streams, as_json, None))
        reporter = _Reporter(streams, as_json, _progress(streams, quiet, scan.total if scan else None))
        try:
            if scan is not None:
                scan.tell(reporter.warn)
            explainer = Explainer(settings, warn=reporter.warn, checkpoint=stops.checkpoint,
                                  progress=reporter.progress.detail if reporter.progress else None)
            if reporter.progress:
                reporter.progress.loaded()
            for path in named_files(inputs, settings.output_dir):  # known before any output is written
                explainer.namer.protect(path)
            sources = _sources(inputs, streams, settings, notice=None if scan else reporter.warn)
            with stops.deferred():  # while images stream, a signal stops the run at the engine's next checkpoint
                summary = explainer.run(stops.at_once(sources), reporter.record)
        finally:
            reporter.close()
    return _finish(summary, settings, streams, quiet)


def _sources(inputs: list[str], streams: Streams, settings: Any, notice: Any) -> Iterator[Any]:
    from gradcam_cli.inputs.sources import iter_sources

    return iter_sources(inputs, streams.stdin, settings.recursive, skip=settings.output_dir, notice=notice)


@dataclass
class _Scan:
    """The named inputs expanded once, before the model loads."""

    total: int = 0  # sources, failed ones included: the records the run will give
    failed: int = 0
    problems: list[Any] = field(default_factory=list)  # in input order: error sources, and lines about empty inputs
    notices: dict[str, None] = field(default_factory=dict)  # the scanner's remarks, each said once

    @property
    def images(self) -> int:
        return self.total - self.failed

    def note(self, message: str) -> None:
        self.notices.setdefault(message, None)

    def tell(self, warn: Any, failed: Any = None) -> None:
        """The scanner's remarks, then the problems in input order: the empty inputs as lines, the
        error sources to `failed` (None before a run: the run gives them their records)."""
        for message in self.notices:
            warn(message)
        for problem in self.problems:
            if isinstance(problem, str):
                warn(problem)
            elif failed is not None:
                failed(problem)


def _scan_named(inputs: list[str], streams: Streams, settings: Any) -> _Scan:
    """Count what the named files, folders and globs hold: the progress bar's total, and an early no (a folder scan is cheap)."""
    scan = _Scan()
    for text in inputs:
        count = 0
        for source in _sources([text], streams, settings, notice=scan.note):
            count += 1
            if source.error:
                scan.failed += 1
                scan.problems.append(source)
        scan.total += count
        if not count:
            kind = "in this folder" if Path(text).is_dir() else "matches"
            scan.problems.append(f"{printable(text)}: no image file {kind}")
    return scan


def _nothing_to_explain(scan: _Scan, reporter: _Reporter) -> int:
    """No named input holds an image: each says why at once and the model is not loaded.

    Exit 1, as the same run gives after loading when every input fails: the
    inputs failed, the options (exit 2) were fine.
    """
    scan.tell(reporter.warn, reporter.failed_input)
    return ExitCode.SOME_INPUTS_FAILED


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


class _Reporter:
    """Records to stdout, messages to stderr; each failure and blank map is said once.

    As JSON, the record goes to stdout and its remarks (why it failed, which
    map is blank) to stderr, one line each. As human lines, the image's own
    `✓`/`✗` line says it all. Messages about the run itself (out of memory,
    notices) go to stderr as they come.
    """

    def __init__(self, streams: Streams, as_json: bool, progress: _Progress | None) -> None:
        self.streams, self.as_json, self.progress = streams, as_json, progress
        # both on one terminal: record lines go above the progress line instead of through it
        self.on_console = progress is not None and streams.stdout_tty and _same_terminal(streams)
        self.stdout_closed = False

    def warn(self, message: str) -> None:
        self._say(message)

    def record(self, record: Any) -> None:
        if self.stdout_closed:
            return  # the reader went away: the engine is only finishing the files being written
        if self.as_json:
            for remark in record.remarks():
                self._say(remark)
            self._out(record.to_json())
        else:
            self._out(_human_line(record))
        if self.progress:
            self.progress.advance(record)

    def failed_input(self, source: Any) -> None:
        """A named input that failed before any model was loaded: its line and record, as in a run."""
        from gradcam_cli.outputs.records import ImageRecord

        self.record(ImageRecord(input=str(source.path), ok=False, error=source.error))

    def _out(self, text: str) -> None:
        if self.on_console:
            assert self.progress is not None
            self.progress.print(text)
            return
        try:
            _write_line(self.streams.stdout, text)
        except _StdoutClosed:
            self.stdout_closed = True
            raise

    def _say(self, message: str) -> None:
        (self.progress.warn if self.progress else self.streams.warn)(message)

    def close(self) -> None:
        if self.progress:
            self.progress.stop()


def _same_terminal(streams: Streams) -> bool:
    try:
        return os.fstat(streams.stdout.fileno()).st_rdev == os.fstat(streams.stderr.fileno()).st_rdev
    except (AttributeError, OSError, ValueError):
        return False


class _Progress:
    """A rich progress line on stderr, only when stderr is a terminal: with a known total, a bar, rate and time left."""

    def __init__(self, stderr: TextIO, total: int | None) -> None:
        from rich.console import Console
        from rich.progress import Progress

        from gradcam_cli.run.pipeline import Summary

        self.console = Console(file=stderr, stderr=True)
        self.bar = Progress(*_progress_columns(total), console=self.console, transient=True)
        self.task = self.bar.add_task("loading model", total=total)
        self.summary = Summary()  # counted as the engine counts, so the line agrees with the closing summary
        self.bar.start()

    def advance(self, record: Any) -> None:
        self.summary.count(record)
        self.bar.update(self.task, advance=1, description=self._counts())

    def loaded(self) -> None:
        self.bar.update(self.task, description=self._counts())

    def _counts(self) -> str:
        counts = self.summary
        skipped = f", {counts.skipped} skipped" if counts.skipped else ""
        failed = f", {counts.failed} failed" if counts.failed else ""
        return f"explained {counts.done}{skipped}{failed}"

    def detail(self, what: str, done: int, total: int) -> None:
        """Long work inside one batch (masked forwards of scorecam/ablationcam)."""
        self.bar.update(self.task, description=f"{self._counts()}; {what}: {done}/{total} forwards")

    def print(self, text: str) -> None:
        """A record line, printed above the progress line (rich redraws it below)."""
        self.console.print(text, markup=False, highlight=False, emoji=False, soft_wrap=True)

    def warn(self, message: str) -> None:
        self.print(f"gradcam: {message}")

    def stop(self) -> None:
        self.bar.stop()


def _progress_columns(total: int | None) -> tuple[Any, ...]:
    from rich.progress import BarColumn, MofNCompleteColumn, SpinnerColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    if total is None:  # paths on stdin: how many will come is not known
        return SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn()
    return (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(bar_width=24), MofNCompleteColumn(),
            _rate_column(), TimeRemainingColumn())


def _rate_column() -> Any:
    """Images per second (seconds per image when slower), from rich's speed estimate."""
    from rich.progress import ProgressColumn
    from rich.text import Text

    class Rate(ProgressColumn):
        def render(self, task: Any) -> Text:
            speed = task.speed
            if not speed:
                return Text("")
            return Text(f"{speed:.1f} img/s" if speed >= 1 else f"{1 / speed:.1f} s/img", style="progress.data.speed")

    return Rate()


def _progress(streams: Streams, quiet: bool, total: int | None = None) -> _Progress | None:
    return _Progress(streams.stderr, total) if streams.stderr_tty and not quiet else None


# ------------------------------------------------------------------- layers

@app.command(no_args_is_help=True)
def layers(
    model: Annotated[str, typer.Argument(help="Model name as for explain (timm, hf-hub:, torchvision:).")],
    depth: Annotated[int | None, typer.Option("--depth", "-d", help="Show modules down to this depth.", min=0)] = None,
    filter_text: Annotated[str | None, typer.Option("--filter", "-f", help="Only modules whose name or type contains this.")] = None,
    json_lines: Annotated[bool, typer.Option("--json", help="One JSON record per module.")] = False,
) -> int:
    """Print the module tree with output shapes and layouts; the default target is marked."""
    from gradcam_cli.layers.paths import default_layer_paths, layer_rows, resolve_layers
    from gradcam_cli.model.load import build_model, default_input_hw, num_prefix_tokens

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
        _write_line(sys.stdout, _layer_line(row, json_lines))
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
    from gradcam_cli.cams.methods import METHODS

    width = max(len(name) for name in METHODS)
    for method in METHODS.values():
        _write_line(sys.stdout, f"{method.name:<{width}}  {method.summary} [{method.passes}]")
    return ExitCode.OK


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


def main(argv: list[str] | None = None) -> None:
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
    except (typer.Abort, KeyboardInterrupt):  # Ctrl-C outside a run, as click or Python report it
        print(f"gradcam: {interrupted()}", file=sys.stderr)
        code = ExitCode.INTERRUPTED
    except (_StdoutClosed, BrokenPipeError):
        code = _stdout_gone()
    except Exception as error:  # noqa: BLE001 - click errors (maybe typer's bundled copy), then the last line of defence
        if debug:
            raise
        if _is_click_error(error):
            print(_usage_message(error, args), file=sys.stderr)
            code = ExitCode.USAGE
        else:
            print(f"gradcam: internal error: {type(error).__name__}: {error} "
                  "(rerun with --debug for the traceback, and report it)", file=sys.stderr)
            code = ExitCode.INTERNAL
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        code = _stdout_gone()
    sys.exit(int(code or 0))


if __name__ == "__main__":  # pragma: no cover
    main()
