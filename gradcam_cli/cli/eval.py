"""`gradcam eval`: which method's maps to believe on this model and these images, in one command.

Every method named explains every image (one model load), three baselines
that know nothing of the model are set beside them, and each metric scores
every map set. The table (terminal), a record per unit and map set (a unit:
a classifier's image, a detector's kept detection; stdout when piped, and
OUT/records.jsonl always), eval.json, eval.csv and the charts come out of one
run; ⟨report⟩ adds each map set's overlay and the HTML report with the
metrics sortable. A stopped run still writes its summaries of what it did.
The model options come from the one option table, as explain's do, and so do
the target options a detector's detections are kept by.
"""

from __future__ import annotations

import inspect
from dataclasses import replace
from pathlib import Path
from typing import Any

import typer

from gradcam_cli.cli.console import NO_IMAGE_FOUND, NO_INPUT_GIVEN, ProgressLine, Streams, names_input, progress_line, write_line
from gradcam_cli.cli.explain import build_report_for, command_streams, run_swept
from gradcam_cli.cli.options import own_option, parameter, parse_methods, parse_names
from gradcam_cli.cli.signals import StopRequests
from gradcam_cli.errors import ExitCode, UsageError, warnings_said
from gradcam_cli.settings import ExplainSettings, build_settings
from gradcam_cli.option_table import BY_NAME, OPTIONS
from gradcam_cli.option_words import as_flag, in_flags
from gradcam_cli.vocab import Metric, Substrate, values

DEFAULT_METHODS = "gradcam,gradcam++,xgradcam,layercam"
DEFAULT_METRICS = "deletion,insertion,drop,increase,sanity"  # and pointing when there are boxes, a detector's energy and pointing;
# ROAD is opt-in (sparse solves)
OUTPUT_DIR = "gradcam_eval"  # eval's own default folder, so its records do not mix with explain's
# every option that builds the model or feeds it (its checkpoint, kwargs, preprocessing), as explain takes them
MODEL_OPTIONS = tuple(option.name for option in OPTIONS if option.group == "model")
# the target group's options that say what is explained: the class, a detector's kept detections (the task only confirms)
TARGET_OPTIONS = ("classes", "task", "score_threshold", "max_detections", "min_area", "prompts", "prompt_file", "template", "references")
TABLE_OPTIONS = (
    "inputs", *MODEL_OPTIONS, "layers", *TARGET_OPTIONS, "crop", "relu", "eigen_smooth", "aug_smooth", "cam_batch_size", "grid",
    "colormap", "alpha", "output_dir", "recursive", "max_pixels", "batch_size", "device", "precision", "workers", "report",
    "tensorboard", "wandb", "json_lines", "quiet",
)  # fmt: skip
CLI_ONLY = ("inputs", "json_lines", "quiet")


def evaluate(ctx: typer.Context, methods: str, metrics: str | None, steps: int, substrate: str, boxes: str | None, **given: Any) -> int:
    """Measure how faithful each method's maps are (deletion, insertion, drop, ROAD, pointing, sanity), beside baselines."""
    from gradcam_cli.evaluate.scoring import Scoring

    inputs, json_lines, quiet = (given.pop(name) for name in CLI_ONLY)
    chosen = parse_methods(methods)
    measured = _metrics(metrics)
    if steps < 1:
        raise UsageError(f"--steps {steps}: give 1 or more points per curve (20 is the usual)")
    if not inputs:
        raise UsageError(NO_INPUT_GIVEN)
    settings = build_settings(given)
    boxes_path = _boxes(boxes)
    from gradcam_cli.run.evaluation import EvalPlan

    substrate_kind = Substrate(parse_names(substrate, "--substrate", values(Substrate))[0])
    scoring = Scoring(metrics=measured, steps=steps, substrate=substrate_kind, chunk=settings.maps.cam_batch_size)
    plan = EvalPlan(
        methods=tuple(chosen), scoring=scoring, boxes=boxes_path, overlays=settings.outputs.report, default_metrics=metrics is None
    )
    streams = command_streams(ctx)
    as_json = (not streams.stdout_tty) if json_lines is None else json_lines
    from gradcam_cli.run.pipeline import model_prints_to_stderr

    from gradcam_cli.inputs.checkpoints import swept_checkpoints
    from gradcam_cli.integrations.trackers import open_trackers

    sweep = swept_checkpoints(settings.model.weights)  # ⟨weights⟩ as a pattern: each checkpoint evaluated in turn
    trackers = open_trackers(settings.outputs, "eval")  # a tracker's missing library: one line, before the model loads
    try:
        with model_prints_to_stderr():  # stdout carries the records only, whatever the model's code prints
            if sweep is None:
                return _Evaluation(settings, plan, streams, as_json, quiet, trackers).run(inputs)

            def evaluate_one(one: ExplainSettings, step: int) -> int:
                return _Evaluation(one, plan, streams, as_json, quiet, trackers, step).run(inputs)

            return run_swept(settings, sweep, streams, quiet, evaluate_one)
    finally:
        trackers.close()


def _metrics(text: str | None) -> tuple[Metric, ...]:
    """The metrics asked for, in the table's order; by default the usual five. Which apply, and what a task adds to the
    defaults (the pointing game with boxes; a detector's energy in box and pointing game, a segmenter's in its region), is
    the task's, once the model
    is loaded (run/evaluation_units.py)."""
    names = parse_names(text if text is not None else DEFAULT_METRICS, "--metrics", values(Metric))
    return tuple(metric for metric in Metric if metric.value in names)


def _boxes(text: str | None) -> Path | None:
    """A --boxes file or folder that is not there fails before the model loads."""
    if text is None:
        return None
    path = Path(text)
    if not path.exists():
        raise UsageError(f"--boxes {text}: no such file or folder; give a CSV or JSON file of boxes, or a folder of mask PNGs")
    return path


class _Evaluation:
    """One run of `gradcam eval`: sources scanned, the evaluator prepared, records streamed, summaries at the end."""

    def __init__(
        self, settings: ExplainSettings, plan: Any, streams: Streams, as_json: bool, quiet: bool, trackers: Any, step: int = 0
    ) -> None:
        self.settings, self.plan, self.streams, self.as_json, self.quiet = settings, plan, streams, as_json, quiet
        self.trackers, self.step = trackers, step  # ⟨tensorboard⟩, ⟨wandb⟩: the summary's means, table and charts, at `step`
        self.failed: list[str] = []

    def run(self, inputs: list[str]) -> int:
        from gradcam_cli.inputs.sources import iter_sources

        output_dir = self.settings.outputs.output_dir
        with StopRequests() as stops:
            sources = list(iter_sources(inputs, self.streams.stdin, self.settings.inputs.recursive, output_dir, notice=self.streams.warn))
            if not sources:
                self.streams.warn(NO_IMAGE_FOUND)
                return ExitCode.SOME_INPUTS_FAILED
            if all(source.error for source in sources):  # nothing to evaluate: no model load
                for source in sources:
                    self._say_failed(str(source.path), source.error or "failed")
                return ExitCode.SOME_INPUTS_FAILED
            progress = progress_line(self.streams, self.quiet, len(sources), verb="evaluated")
            try:
                with warnings_said(progress.warn if progress else self.streams.warn, as_flag):
                    return self._evaluate(stops, sources, progress)
            finally:
                if progress:
                    progress.stop()

    def _evaluate(self, stops: StopRequests, sources: list[Any], progress: Any) -> int:
        from gradcam_cli.outputs.naming import ensure_writable
        from gradcam_cli.outputs.run_files import RunFiles
        from gradcam_cli.run.evaluation import Evaluator

        warn = progress.warn if progress else self.streams.warn
        counts = _Counts(progress) if progress else None
        evaluator = Evaluator(
            self.settings, self.plan, warn=warn, checkpoint=stops.checkpoint, progress=counts.worked if counts else lambda _d, _w: None
        )
        if counts:
            counts.worked(0.0, "")
        unmatched = evaluator.extras.unmatched_notice([source.path for source in sources])
        if unmatched:
            evaluator.warn(unmatched)
        output_dir = self.settings.outputs.output_dir
        ensure_writable(output_dir)
        line = _run_line(evaluator, self.streams)
        files = RunFiles(output_dir, line)
        self.trackers.start(line, output_dir, lambda message: warn(in_flags(message)), self.step)

        def emit(record: Any) -> None:
            files.record(record)
            if not record.ok:
                self._say_failed(record.input, record.error or "failed", progress)
            if self.as_json:
                write_line(self.streams.stdout, record.to_json())
            if counts:
                counts.counted(record)

        stopped = True
        try:
            with stops.deferred():
                evaluator.run(stops.at_once(sources), emit)
            stopped = False
        finally:
            totals = evaluator.totals
            files.finish({"images": len(totals.images), "failed": len(totals.failed_images)}, interrupted=stopped)
            self._summarise(evaluator, stopped, progress)
        return ExitCode.SOME_INPUTS_FAILED if self.failed else ExitCode.OK

    def _summarise(self, evaluator: Any, stopped: bool, progress: Any) -> None:
        """eval.json, eval.csv, the charts and the table, of what was done (also when stopped); the report if asked."""
        from gradcam_cli.cli.eval_table import eval_table
        from gradcam_cli.outputs.eval_files import write_eval_files

        output_dir = self.settings.outputs.output_dir
        summary = evaluator.totals.summary({**evaluator.context(), "interrupted": stopped})
        if progress:
            progress.stop()
        if not summary["results"]:
            return
        try:
            written = write_eval_files(output_dir, summary)
        except OSError as error:
            self.streams.warn(f"cannot write the summaries into {output_dir}: {error.strerror or error}")
            written = []
        if self.trackers:
            from gradcam_cli.outputs.eval_files import csv_rows

            self.trackers.evaluation(summary, written, csv_rows(summary))
        if not (self.quiet and self.as_json):
            stream = self.streams.stderr if self.as_json else self.streams.stdout
            terminal = self.streams.stderr_tty if self.as_json else self.streams.stdout_tty  # fitted to it; a file gets it whole
            stream.write(eval_table(summary, width=0 if terminal else None, color=not self.as_json and terminal))
            stream.flush()
        if self.settings.outputs.report:
            build_report_for(output_dir, self.streams, self.quiet)
        if not self.quiet and written:
            images = f"{summary['images']} image{'s' if summary['images'] != 1 else ''}"
            self.streams.warn(f"evaluated {images}; summaries in {output_dir}/ ({', '.join(p.name for p in written)})")

    def _say_failed(self, path: str, error: str, progress: Any = None) -> None:
        self.failed.append(path)
        line = error if names_input(error, path) else f"{path}: {error}"
        (progress.warn if progress else self.streams.warn)(line)


class _Counts:
    """eval's progress line: the bar counts images' worth of work done (run/evaluation.py's Work, moving with each step of
    a batch), the words the images whose records are out and what the batch is at."""

    def __init__(self, line: ProgressLine) -> None:
        self.line, self.what = line, ""
        self.images: set[str] = set()
        self.failed: set[str] = set()

    def worked(self, done: float, what: str) -> None:
        self.what = what
        self.line.bar.update(self.line.task, completed=done, description=self._words())

    def counted(self, record: Any) -> None:
        self.images.add(record.input)
        if not record.ok:
            self.failed.add(record.input)
        self.line.bar.update(self.line.task, description=self._words())

    def _words(self) -> str:
        failed = f", {len(self.failed)} failed" if self.failed else ""
        return f"evaluated {len(self.images)}{failed}" + (f"; {self.what}" if self.what else "")


def _run_line(evaluator: Any, streams: Streams) -> dict[str, Any]:
    """What the runs file says of this evaluation: every method measured, every layer any of them used."""
    from gradcam_cli.version import __version__
    from gradcam_cli.outputs.run_files import run_line

    context = evaluator.context()
    layers = sorted({layer for layers in context["layers"].values() for layer in layers})
    method = ",".join(context["methods"])
    return run_line(evaluator.settings, streams.command, version=__version__, model=context["model"], method=method, layers=layers,
                    device=context["device"])  # fmt: skip


def _table_parameter(name: str) -> inspect.Parameter:
    """A table option as eval takes it; the output folder defaults to eval's own."""
    option = BY_NAME[name]
    return parameter(replace(option, default=OUTPUT_DIR) if name == "output_dir" else option)


evaluate.__signature__ = inspect.Signature(  # type: ignore[attr-defined]  # what typer reads: eval's own options, then the table's
    [
        inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context),
        own_option("methods", "--methods", DEFAULT_METHODS, "M,M", "CAM methods to evaluate, comma-separated (see `gradcam methods`)."),
        own_option(
            "metrics", "--metrics", None, "NAME,NAME",
            f"Metrics, comma-separated: {', '.join(values(Metric))} [default: {DEFAULT_METRICS}, and pointing with --boxes; "
            "a detector's and a segmenter's also energy and pointing, in each detection's own box, each region itself].",
            kind=str | None,
        ),
        own_option("steps", "--steps", 20, "N", "Points on each deletion and insertion curve.", kind=int),
        own_option(
            "substrate", "--substrate", Substrate.zero.value, "|".join(values(Substrate)),
            "What removed pixels become (deletion) and what insertion starts from.",
        ),
        own_option(
            "boxes", "--boxes", None, "FILE|DIR", "Where the objects are (a classifier's pointing game): boxes (CSV, JSON) or mask PNGs.",
            kind=str | None,
        ),
        *(_table_parameter(name) for name in TABLE_OPTIONS),
    ]
)  # fmt: skip
