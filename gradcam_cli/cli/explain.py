"""`gradcam explain`: its options come from the one table (option_table.OPTIONS); then a run, reported as it goes.

The command's signature is built from the table, so a flag, its help, its
default and its preset key cannot drift apart. Named inputs are scanned before
the model loads (a run of only bad paths fails at once), signals become stop
requests, and the records go to the console as they come.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import typer

from gradcam_cli.cli.console import NO_IMAGE_FOUND, NO_INPUT_GIVEN, Reporter, Streams, progress_line
from gradcam_cli.cli.named_inputs import Scan, check_files, input_sources, scan_named, stdin_ahead
from gradcam_cli.cli.options import parameter
from gradcam_cli.cli.signals import HANDLED, StopRequests
from gradcam_cli.errors import ExitCode, GradcamError, Interrupted, ModelError, UsageError, warnings_said
from gradcam_cli.settings import ExplainSettings, build_settings
from gradcam_cli.option_table import OPTIONS
from gradcam_cli.option_words import as_flag, in_flags

CLI_ONLY = ("inputs", "json_lines", "config", "quiet")  # how to run, not what: no preset key, not in the settings


def explain(ctx: typer.Context, **given: Any) -> int:
    """Write heat-map overlays showing what the model looks at for each image."""
    inputs, json_lines, config, quiet = (given.pop(name) for name in CLI_ONLY)
    values = _merge_preset(ctx, given, Path(config) if config else None)
    if not inputs:
        raise UsageError(NO_INPUT_GIVEN)
    import os

    from gradcam_cli.inputs.shards import with_launcher

    settings = with_launcher(build_settings(values), os.environ)  # torchrun's or SLURM's share and local rank
    from gradcam_cli.inputs.checkpoints import swept_checkpoints
    from gradcam_cli.integrations.trackers import open_trackers

    sweep = swept_checkpoints(settings.model.weights)  # ⟨weights⟩ as a pattern: several checkpoints, in turn
    trackers = open_trackers(settings.outputs, "explain")  # a tracker's missing library: one line, before the model loads
    try:
        if sweep is not None:
            return _run_sweep(settings, sweep, inputs, command_streams(ctx), json_lines, quiet, trackers)
        return _run_explain(settings, inputs, command_streams(ctx), json_lines, quiet, trackers)
    finally:
        trackers.close()


def _run_sweep(
    settings: ExplainSettings, sweep: list[Any], inputs: list[str], streams: Streams, json_lines: bool | None, quiet: bool, trackers: Any
) -> int:
    """Each checkpoint explained in turn (one model in memory at a time), its outputs in its own subfolder of the
    output folder, logged to the trackers at its step: the same image's map through training."""
    if "-" in inputs:
        raise UsageError("a sweep of checkpoints (⟨weights~⟩ as a pattern) reads the inputs once per checkpoint: name them, not '-'")

    def explain_one(one: ExplainSettings, step: int) -> int:
        return _run_explain(one, inputs, streams, json_lines, quiet, trackers, step)

    return run_swept(settings, sweep, streams, quiet, explain_one)


def run_swept(
    settings: ExplainSettings, sweep: list[Any], streams: Streams, quiet: bool, run: Callable[[ExplainSettings, int], int]
) -> int:
    """`run` once per checkpoint with its settings (its weights, its subfolder of the output folder) and step, each
    said as it starts (explain's and eval's sweeps). A checkpoint that cannot be loaded is one line and the others go
    on; the worst exit code is the sweep's."""
    import gc
    from dataclasses import replace

    codes = []
    for number, checkpoint in enumerate(sweep, 1):
        folder = settings.outputs.output_dir / checkpoint.folder
        if not quiet:
            streams.warn(f"checkpoint {number} of {len(sweep)}: {checkpoint.path} (step {checkpoint.step}); outputs in {folder}/")
        model, outputs = replace(settings.model, weights=checkpoint.path), replace(settings.outputs, output_dir=folder)
        try:
            codes.append(run(replace(settings, model=model, outputs=outputs), checkpoint.step))
        except ModelError as error:
            if f"⟨weights={checkpoint.path}⟩" not in error.message:
                raise  # the model itself, not this checkpoint: every checkpoint would fail alike
            streams.warn(f"error: {error.spelled(as_flag)}; the other checkpoints go on")
            codes.append(ExitCode.SOME_INPUTS_FAILED)
        gc.collect()  # the last checkpoint's model goes before the next one loads
    return max(codes)


def command_streams(ctx: typer.Context) -> Streams:
    """The streams `main` was given (tests pass their own), else the process's."""
    return ctx.obj if isinstance(ctx.obj, Streams) else Streams.current()


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


def _run_explain(
    settings: ExplainSettings, inputs: list[str], streams: Streams, json_lines: bool | None, quiet: bool, trackers: Any, step: int = 0
) -> int:
    """What can be checked without the model first (no model load when no input holds an image), then the run,
    reported as it goes."""
    from gradcam_cli.inputs.sources import named_files

    as_json = (not streams.stdout_tty) if json_lines is None else json_lines
    check_files(settings)
    with StopRequests() as stops:  # the signal handling and the progress line cover the model's loading too
        inputs, streams = stdin_ahead(inputs, streams)
        if not inputs:
            return ExitCode.SOME_INPUTS_FAILED  # stdin was all there was, and it was empty: said
        scan = scan_named(inputs, streams, settings) if "-" not in inputs else None
        if scan is not None and not scan.images:
            if scan.elsewhere:
                return _none_in_this_shard(settings, streams, quiet)
            return _nothing_to_explain(scan, Reporter(streams, as_json, None))
        reporter = Reporter(streams, as_json, progress_line(streams, quiet, scan.total if scan and not scan.videos else None))
        try:
            if scan is not None:
                scan.tell(reporter.warn)
            with warnings_said(reporter.warn, as_flag):  # the library's fallbacks, above the progress line
                explainer = _explainer(settings, reporter, stops)
                if reporter.progress:
                    reporter.progress.loaded()
                for path in named_files(inputs, settings.outputs.output_dir):  # known before any output is written
                    explainer.namer.protect(path)
                found = input_sources(inputs, streams, settings, notice=None if scan else reporter.warn)
                summary = _stream(explainer, stops, found, reporter, streams, quiet, (trackers, step))
        finally:
            reporter.close()
    return _finish(summary, settings, streams, quiet)


def _explainer(settings: ExplainSettings, reporter: Reporter, stops: StopRequests) -> Any:
    """The run's engine: an Explainer in this process, or with ⟨ray⟩ one that checks the run here (the model on the
    CPU) and hands the images to Ray Data actors."""
    from dataclasses import replace

    from gradcam_cli.run.pipeline import Explainer  # torch and the engine: only once there is an image to explain

    progress = reporter.progress.detail if reporter.progress else None
    if settings.run.ray is None:
        return Explainer(settings, warn=reporter.warn, checkpoint=stops.checkpoint, progress=progress)
    from gradcam_cli.run.ray_data import RayRunner, connect

    connect(str(settings.run.ray))  # before the model loads: a missing extra or an unreachable cluster is one line at once
    here = replace(settings, run=replace(settings.run, device="cpu"))
    return RayRunner(Explainer(here, warn=lambda _m: None, checkpoint=stops.checkpoint), settings, reporter.warn)


def _stream(
    explainer: Any,
    stops: StopRequests,
    sources: Iterator[Any],
    reporter: Reporter,
    streams: Streams,
    quiet: bool,
    tracking: tuple[Any, int],
) -> Any:
    """The images explained, each record kept in the output folder's records file as it comes, then shown, and sent
    to the trackers asked for (at `tracking`'s step).

    The runs file gets the run's first line before any image and its last one
    after, also when the run is stopped; so does the report, with --report.
    """
    from gradcam_cli.outputs.naming import ensure_writable
    from gradcam_cli.outputs.run_files import RunFiles

    settings = explainer.settings
    ensure_writable(settings.outputs.output_dir)
    from gradcam_cli.inputs.shards import shard_of

    shard = shard_of(settings)
    line = _run_line(explainer, streams)
    files = RunFiles(settings.outputs.output_dir, line, shard.suffix if shard else None)
    trackers, step = tracking
    trackers.start(line, settings.outputs.output_dir, lambda message: reporter.warn(in_flags(message)), step)

    def emit(record: Any) -> None:
        files.record(record)  # on disk before stdout, which may be gone (`| head`)
        reporter.record(record)
        trackers.record(record)

    stopped = True
    try:
        with stops.deferred():  # while images stream, a signal stops the run at the engine's next checkpoint
            summary = explainer.run(stops.at_once(sources), emit)
            stopped = False  # every input is done: a signal landing now stops nothing
    except Interrupted as error:
        if stopped:
            raise
        signal = HANDLED[stops.signum][0] if stops.signum in HANDLED else "a signal"
        late = f"interrupted by {signal} after the last image; every input was done, nothing is left to do"
        raise Interrupted(late, error.exit_code) from None
    finally:
        files.finish(explainer.summary.counts(), interrupted=stopped)  # a stopped run's counts too
        trackers.end_step()
        if settings.outputs.report:
            build_report_for(settings.outputs.output_dir, reporter, quiet)
    return summary


def _run_line(explainer: Any, streams: Streams) -> dict[str, Any]:
    """What the runs file says of this run, from what every record repeats (computed once for the run)."""
    from gradcam_cli.outputs.run_files import run_line

    context = explainer.writer.context
    what = {key: context[key] for key in ("model", "method", "layers", "device")}
    return run_line(explainer.settings, streams.command, version=context["settings"]["version"], **what)


def build_report_for(output_dir: Path, reporter: Reporter | Streams, quiet: bool) -> None:
    """--report (explain and eval): the output folder's report, of what was done; a failure to build it is said, and loses nothing."""
    from gradcam_cli.report.build import build_report

    try:
        index = build_report(output_dir, warn=reporter.warn)
    except (GradcamError, OSError) as error:  # e.g. the disk filled up writing thumbnails
        reporter.warn(f"no report: {error}")
        return
    if not quiet:
        reporter.warn(f"report: {index}")


def _none_in_this_shard(settings: ExplainSettings, streams: Streams, quiet: bool) -> int:
    """A shard that none of the inputs fell to has done its part: it says so, and succeeds."""
    from gradcam_cli.inputs.shards import shard_of

    shard = shard_of(settings)
    assert shard is not None, "only a shard has inputs that are another's"
    if not quiet:
        streams.warn(f"no input falls to {shard.describe()}; the other shards explain them")
    return ExitCode.OK


def _nothing_to_explain(scan: Scan, reporter: Reporter) -> int:
    """No named input holds an image: each says why at once and the model is not loaded.

    Exit 1, as the same run gives after loading when every input fails: the
    inputs failed, the options (exit 2) were fine.
    """
    scan.tell(reporter.warn, reporter.failed_input)
    return ExitCode.SOME_INPUTS_FAILED


def _counted(summary: Any) -> str:
    """What a run's records count: images, a video's frames, a volume's slices, or a mix (each part's number said)."""
    parts = {"video frames": summary.frames, "slices": summary.slices}
    if not any(parts.values()):
        return "images"
    for name, count in parts.items():
        if count == summary.total:
            return name
    return "inputs (" + ", ".join(f"{count} {name}" for name, count in parts.items() if count) + ")"


def _finish(summary: Any, settings: ExplainSettings, streams: Streams, quiet: bool) -> int:
    if summary.total == 0:
        streams.warn(NO_IMAGE_FOUND)
        return ExitCode.SOME_INPUTS_FAILED
    if not quiet:
        blank = f", {summary.blank} with a blank map" if summary.blank else ""
        failed = f", {summary.failed} failed" if summary.failed else ""
        skipped = f", {summary.skipped} skipped (outputs exist)" if summary.skipped else ""
        judged = summary.correct + summary.wrong
        wrong = f", {summary.wrong} of {judged} with a known class wrong" if judged else ""
        from gradcam_cli.inputs.shards import shard_of

        shard = shard_of(settings)
        part = f" in {shard.describe()}" if shard else ""
        what = _counted(summary)
        streams.warn(
            f"explained {summary.done} of {summary.total} {what}{part}{skipped}{failed}{blank}{wrong}; "
            f"overlays in {settings.outputs.output_dir}/"
        )
    return ExitCode.SOME_INPUTS_FAILED if summary.failed else ExitCode.OK


explain.__signature__ = inspect.Signature(  # type: ignore[attr-defined]  # what typer reads: the table's options
    [
        inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context),
        *(parameter(option) for option in OPTIONS),
    ]
)
