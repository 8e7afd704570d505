"""One run of `gradcam compare`: the model loaded once, the rows resolved, then each image's grid, record and line.

It runs as explain's does: the inputs scanned before the model loads, the
progress line and the cost of masked forwards on stderr, Ctrl-C and SIGTERM a
request to stop before the next cell (every grid written is whole and kept),
each record in the output folder's records file and the run in its runs file,
grids named by explain's rule (`OUT/<input path>.compare.png`, never an input
of the run, never read back as one), and every warning one `gradcam:` line.
Its messages name compare's own flags (`--methods`, `--layers`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gradcam_cli.cli.compare_cells import Cell, Columns
from gradcam_cli.cli.compare_record import GRID_NAME, CompareRecord, GridReporter, compare_flag, in_compare_flags
from gradcam_cli.cli.console import NO_IMAGE_FOUND, Streams, progress_line
from gradcam_cli.cli.signals import HANDLED, StopRequests
from gradcam_cli.errors import (
    ExitCode,
    GradcamError,
    InputError,
    Interrupted,
    OutputError,
    UsageError,
    keep_marks,
    spelled,
    warnings_said,
)
from gradcam_cli.option_words import as_flag
from gradcam_cli.settings import ExplainSettings
from gradcam_cli.vocab import TargetKind


@dataclass(frozen=True)
class Row:
    """One row of the grid: its label, the model its cells explain with (a sweep's checkpoint), and its layer."""

    label: str
    ready: Any
    layer: str
    size: tuple[int, int] | None = None  # the layer's map, height x width (None: not known)
    step: int | None = None  # a sweep's: the checkpoint's step


class Comparison:
    """One run of `gradcam compare`: the model loaded once, the layers resolved, then each image's grid and record."""

    def __init__(self, settings: ExplainSettings, streams: Streams, as_json: bool, quiet: bool, detection: int | None = None) -> None:
        self.settings, self.streams, self.as_json, self.quiet = settings, streams, as_json, quiet
        self.detection = detection  # a detector's: which kept detection of each image the cells explain (None: the first)
        self.reporter = GridReporter(streams, as_json, None)
        self.said: set[str] = set()  # every remark said, in compare's flags
        self.records: list[CompareRecord] = []
        self.total = 0
        self.folders: Any = None  # outputs/files.Folders of the run (imported with the engine, not with --help)
        self.kind = TargetKind.single_class  # what the cells explain, as the prepared run says it
        self.sweep: list[Any] | None = None  # a sweep of ⟨weights⟩: inputs/checkpoints.Checkpoint, the rows
        self.matched: Any = None  # model/towers.Matched: the prompts or references the model scores against (None: neither)

    def warn(self, message: str) -> None:
        """A remark on stderr, one line, each said once, its option marks spelled as compare's flags."""
        text = " ".join(spelled(message, compare_flag).split())
        if text not in self.said:
            self.said.add(text)
            self.reporter.warn(text)

    def run(self, inputs: list[str], columns: Columns, paths: list[str] | None, sweep: list[Any] | None = None) -> int:
        """Scan, load, compare; a signal stops the run before the next cell, the grids written so far kept. With a
        `sweep` of checkpoints the rows are the checkpoints, each its own model, at one layer."""
        self.sweep = sweep
        from gradcam_cli.inputs.sources import iter_sources

        stops = StopRequests()
        try:
            with stops, warnings_said(self.warn, keep_marks):  # every warning one line, the model's loading too
                scan = iter_sources(
                    inputs, self.streams.stdin, self.settings.inputs.recursive, self.settings.outputs.output_dir, notice=self.warn
                )
                sources = list(stops.at_once(scan))  # reading paths on stdin may wait for ever: a signal stops it at once
                self.total = len(sources)
                if all(source.error for source in sources):  # nothing to compare: no model load
                    return self._finish([self._failed(source.path, source.error or "") for source in sources])
                self.reporter = GridReporter(self.streams, self.as_json, progress_line(self.streams, self.quiet, len(sources), "compared"))
                try:
                    self._compare_all(stops, sources, columns, paths)
                finally:
                    self.reporter.close()
                    self.reporter = GridReporter(self.streams, self.as_json, None)
        except Interrupted as error:
            raise Interrupted(self._stopped(stops.signum), error.exit_code) from None
        return self._finish(self.records, reported=True)

    def _stopped(self, signum: int | None) -> str:
        """explain's words on a stop, with what this run did: every grid written is whole and stays."""
        name = HANDLED.get(signum or 0, ("Ctrl-C", None))[0]
        done = sum(record.ok for record in self.records)
        return f"interrupted by {name}; every file written is complete; {done} of {self.total} images compared, their grids kept"

    def _compare_all(self, stops: StopRequests, sources: list[Any], columns: Columns, paths: list[str] | None) -> None:
        from gradcam_cli.outputs.files import Folders
        from gradcam_cli.outputs.naming import OutputNamer, ensure_writable

        output_dir = self.settings.outputs.output_dir
        ensure_writable(output_dir)
        self.folders = Folders()
        rows = self._rows(paths)
        self._prepare(rows, columns)
        if self.reporter.progress:
            self.reporter.progress.loaded()
        namer = OutputNamer(output_dir, GRID_NAME)
        for source in sources:  # known before any grid is written: none may replace an input
            namer.protect(source.path)
        files = self._run_files(rows, columns)
        stopped = True
        try:
            with stops.deferred():  # a signal waits for the next cell
                for source in sources:
                    stops.checkpoint()
                    record = self._one(stops, namer, source, rows, columns)
                    files.records.write(record.to_json())  # on disk before stdout, which may be gone (`| head`)
                    self.records.append(record)
                    self.reporter.record(record)
            stopped = False
        finally:
            failed = sum(not record.ok for record in self.records)
            files.finish({"total": len(self.records), "done": len(self.records) - failed, "failed": failed}, interrupted=stopped)

    def _rows(self, paths: list[str] | None) -> list[Row]:
        """The layers, top to bottom, on the model; with a sweep, its checkpoints at the one layer (the model's default
        when ⟨layers⟩ are the stages), each loaded once. A bad layer stops here, before any image."""
        if not self.sweep:
            ready, layers = self._load(paths, self.settings.model.weights)
            return [Row(layer, ready, layer, size) for layer, size in zip(layers, self._resolutions(ready, layers))]
        loaded = [self._load(paths if paths else [], checkpoint.path) for checkpoint in self.sweep]
        first, layers = loaded[0]  # every checkpoint is the same model: its layer and map size found once
        layer = layers[0] if layers else self._default_layer(first)
        size = self._resolutions(first, [layer])[0]
        return [Row(c.folder, ready, layer, size, c.step) for c, (ready, _) in zip(self.sweep, loaded)]

    def _load(self, paths: list[str] | None, weights: Path | None) -> tuple[Any, list[str]]:
        """The model as explain() takes it, and the rows' layers, canonical ([]: none asked)."""
        from gradcam_cli import api
        from gradcam_cli.layers.paths import resolve_layer
        from gradcam_cli.layers.stages import stage_paths

        model = self.settings.model
        ready = api.load_model(  # its notices are Notice warnings: run() says them in compare's flags
            model.name, weights, model.labels, pretrained=model.pretrained, device=self.settings.run.device,
            model_kwargs=dict(model.kwargs), ema=model.ema, output=model.output, trust_pickle=model.trust_pickle, **model.preprocessing(),
        )  # fmt: skip
        if paths is None:
            return ready, stage_paths(ready.model, ready.arch, ready.source, notice=self.warn, input_hw=ready.data_config.input_hw)
        return ready, list(dict.fromkeys(resolve_layer(ready.model, path, ready.name).name for path in paths))

    def _default_layer(self, ready: Any) -> str:
        """The layer `gradcam explain` takes on this model when none is named."""
        from gradcam_cli.run.prepare import prepare_run

        prepared = prepare_run(self.settings, loaded=ready, device=ready.device, warn=lambda _m: None)
        if len(prepared.layers) > 1:
            names = ", ".join(layer.name for layer in prepared.layers)
            raise UsageError(f"a sweep's rows are checkpoints at one layer; the model's default is several ({names}): name one in ⟨layers⟩")
        return prepared.layers[0].name

    def _prepare(self, rows: list[Row], columns: Columns) -> None:
        """Each method prepared as explain prepares a run, on every row, before any image: its options checked, the
        classes found, and what scorecam's and ablationcam's masked forwards will cost said."""
        from gradcam_cli.run.prepare import prepare_run
        from gradcam_cli.vocab import Method

        for method in columns.methods:
            target = replace(self.settings.target, method=Method(method), layers=tuple(dict.fromkeys(row.layer for row in rows)))
            ready = rows[0].ready
            prepared = prepare_run(replace(self.settings, target=target), loaded=ready, device=ready.device, warn=self.warn)
            for notice in prepared.notices:
                self.warn(notice)
            self.kind, self.matched = prepared.kind, prepared.loaded.matched

    def _resolutions(self, ready: Any, rows: list[str]) -> list[tuple[int, int] | None]:
        """Each row's map size (the layer's spatial output, a token grid read as a run reads it) from one probe forward."""
        from gradcam_cli.layers.tree import spatial_sizes

        try:
            sizes = spatial_sizes(ready.model, ready.data_config.input_hw)
        except (GradcamError, RuntimeError, ValueError):  # the rows still draw; only their notes are missing
            sizes = {}
        return [sizes.get(layer, self.settings.target.grid) for layer in rows]

    def _run_files(self, rows: list[Row], columns: Columns) -> Any:
        """The output folder's records file and the run's lines in its runs file, as explain and eval keep them."""
        from gradcam_cli import __version__
        from gradcam_cli.outputs.run_files import RunFiles, run_line

        what = run_line(
            self.settings, self.streams.command, version=__version__, model=rows[0].ready.name, method=",".join(columns.methods),
            layers=list(dict.fromkeys(row.layer for row in rows)), device=str(rows[0].ready.device),
        )  # fmt: skip
        return RunFiles(self.settings.outputs.output_dir, what)

    def _one(self, stops: StopRequests, namer: Any, source: Any, rows: list[Row], columns: Columns) -> CompareRecord:
        """One image's record: its grid written, or why it failed (the other images go on)."""
        try:
            if source.error:
                raise InputError(source.error)
            return self._grid(stops, namer, source, rows, columns)
        except InputError as error:  # explain() names an array input `<array>`: here it has its path
            message = in_compare_flags(error).spelled(as_flag).replace("<array>", str(source.path), 1)
            return self._failed(source.path, message)

    def _grid(self, stops: StopRequests, namer: Any, source: Any, rows: list[Row], columns: Columns) -> CompareRecord:
        """The image's cells, each as explain() gives it, drawn into the grid and written; its record."""
        from gradcam_cli.inputs.decode import load_image
        from gradcam_cli.outputs.grid import draw_grid
        from gradcam_cli.outputs.legend import EACH_RAW, MINMAX
        from gradcam_cli.outputs.naming import OutputNamer
        from gradcam_cli.vocab import Norm

        base = OutputNamer.base_for(source.relative)
        output = namer.paths(base, None, False)[0]
        photo = load_image(source.path, self.settings.inputs.max_pixels)
        cells = self._cells(stops, photo, source.path, rows, columns)
        first, ready = cells[-1 if self.sweep else 0][0], rows[-1].ready  # a sweep's cells explain its last checkpoint's class
        notes = [_note(row) for row in rows]
        scale = EACH_RAW if self.settings.maps.norm is Norm.none else MINMAX
        grid = draw_grid(
            photo, [[cell.overlay_rgb for cell in row] for row in cells], rows=[row.label for row in rows], columns=columns.names,
            header=columns.header(first, self.kind, ready.name), notes=notes, scale=scale, colormap=self.settings.outputs.colormap,
            column_notes=columns.notes(cells[0]),
        )  # fmt: skip
        self._write(output, grid.picture)
        methods = [columns.methods[0 if columns.by_prompt else c] for c in range(len(columns.names))]
        boxes = [
            {"row": r, "col": c, "layer": rows[r].layer, **({"step": rows[r].step} if self.sweep else {}), "method": methods[c],
             "class_index": cell.class_index, "class_name": cell.class_name,
             "score": round(cell.score, 6), "blank": cell.blank, "range": cell.range, "box": list(box)}
            for r, row in enumerate(grid.cells)
            for c, (box, cell) in enumerate(zip(row, cells[r]))
        ]  # fmt: skip
        matched = self.matched
        return CompareRecord(
            input=str(source.path), ok=True, model=ready.name, class_index=first.class_index, class_name=first.class_name,
            probability=first.probability, score=round(first.score, 6), target=self.kind.value,
            prompts=list(matched.prompts) if matched and matched.task == "prompt" else None,
            references=list(matched.references) if matched and matched.references else None, output=str(output),
            outputs=[str(output)], rows=[row.label for row in rows], down="checkpoints" if self.sweep else "layers",
            resolutions=[list(row.size) if row.size else None for row in rows], across=columns.what,
            columns=columns.names, cells=boxes,
        )  # fmt: skip

    def _cells(self, stops: StopRequests, photo: Any, path: Path, rows: list[Row], columns: Columns) -> list[list[Cell]]:
        """Every cell of the image, the progress line saying which; a stop request is honoured before each explain().
        A sweep's rows are done last checkpoint first, so every cell explains the trained model's class."""
        classes: Any = self.settings.target.classes[0] if self.settings.target.classes else None
        progress = self.reporter.progress
        cells: list[list[Cell]] = [[] for _ in rows]
        order = range(len(rows) - 1, -1, -1) if self.sweep else range(len(rows))
        for done, r in enumerate(order):
            for c, method in enumerate(columns.methods):  # several prompts: one method, one explain() gives the row
                stops.checkpoint()
                if progress:
                    count = len(columns.methods)
                    progress.doing(f"{path.name}: {method} @ {rows[r].label} ({done * count + c + 1}/{len(rows) * count})")
                row = columns.cells(self._explain(photo, rows[r].ready, rows[r].layer, method, classes), self.detection)
                if row[0].detection is None and self.kind not in (TargetKind.prompt, TargetKind.reference):
                    classes = row[0].class_index  # every cell explains the class of the first (a detector's: the same detection)
                cells[r].extend(row)
        return cells

    def _explain(self, photo: Any, ready: Any, layer: str, method: str, classes: Any) -> Any:
        """One cell: explain() with the run's options (its warnings are lines, each said once)."""
        from gradcam_cli import api

        s = self.settings
        return api.explain(
            photo, ready, layers=layer, method=method, classes=classes, crop=s.inputs.crop, colormap=s.outputs.colormap.value,
            alpha=s.outputs.alpha, relu=s.maps.relu, norm=s.maps.norm.value, eigen_smooth=s.maps.eigen_smooth,
            aug_smooth=s.maps.aug_smooth, cam_batch_size=s.maps.cam_batch_size, grid=s.target.grid, precision=s.run.precision.value,
            score_threshold=s.target.score_threshold, max_detections=s.target.max_detections, min_area=s.target.min_area,
            prompts=list(s.target.prompts), prompt_file=s.target.prompt_file, template=s.target.template,
            references=list(s.target.references),
        )  # fmt: skip

    def _write(self, output: Path, picture: Any) -> None:
        from gradcam_cli.outputs.files import write_atomic
        from gradcam_cli.outputs.render import encode_png

        try:
            self.folders.prepare(output.parent)  # the first grid in a folder: a killed run's temporary files cleared
            write_atomic(output, encode_png(picture))
        except OSError as error:
            raise OutputError(f"cannot write {output}: {error.strerror or error}; choose another ⟨output_dir⟩") from None

    def _failed(self, path: Path, message: str) -> CompareRecord:
        return CompareRecord(input=str(path), ok=False, error=message or f"{path}: failed")

    def _finish(self, records: list[CompareRecord], reported: bool = False) -> int:
        if not reported:
            for record in records:
                self.reporter.record(record)
        failed = sum(not record.ok for record in records)
        if not records:
            self.streams.warn(NO_IMAGE_FOUND)
            return ExitCode.SOME_INPUTS_FAILED
        if not self.quiet:
            where = f"; grids in {self.settings.outputs.output_dir}/" if failed < len(records) else ""
            self.streams.warn(f"compared {len(records) - failed} of {len(records)} images{f', {failed} failed' if failed else ''}{where}")
        return ExitCode.SOME_INPUTS_FAILED if failed else ExitCode.OK


def _note(row: Row) -> str:
    """Under a row's label: a checkpoint's step, and the layer's map size."""
    size = f"{row.size[0]}x{row.size[1]}" if row.size else ""
    return f"step {row.step}" + (f", {row.layer} {size}".rstrip() if size else "") if row.step is not None else size
