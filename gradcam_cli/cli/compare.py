"""`gradcam compare`: one grid per image, rows of layers by columns of methods, to see how the evidence forms.

The model options come from the one option table (option_table.OPTIONS), built
into the signature as explain's are; only `--methods` and `--layers` are
compare's own. Each cell is `gradcam_cli.explain()` of the image with that
method and layer on the model loaded once, so a cell is exactly the overlay
`gradcam explain --method M --layer L` writes. Bad method or layer names stop
the run before any image is explained (exit 2); a bad image gets an error
record and the others go on (exit 1).
"""

from __future__ import annotations

import inspect
import json
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePath
from typing import Any

import typer

from gradcam_cli.cli.console import NO_IMAGE_FOUND, Streams, names_input, write_line
from gradcam_cli.cli.explain import command_streams
from gradcam_cli.cli.options import own_option, parameter, parse_methods
from gradcam_cli.errors import ExitCode, InputError, OutputError, UsageError, printable
from gradcam_cli.settings import ExplainSettings, build_settings
from gradcam_cli.option_table import BY_NAME, as_flag, in_flags

STAGES = "stages"
# the table's options that mean the same in a comparison; --method and --layer become --methods and --layers, and
# what shapes explain's outputs (style, caption, raw maps, top-k, resume) or its streaming (batches, workers) is left out
TABLE_OPTIONS = (
    "inputs", "model", "pretrained", "weights", "labels", "classes", "crop", "relu", "norm", "eigen_smooth", "aug_smooth",
    "cam_batch_size", "grid", "colormap", "alpha", "output_dir", "recursive", "max_pixels", "device", "precision",
    "json_lines", "quiet",
)  # fmt: skip
CLI_ONLY = ("inputs", "json_lines", "quiet")


def compare(ctx: typer.Context, methods: str, layers: str, **given: Any) -> int:
    """Write one grid per image: the maps of every --layers (rows) by every --methods (columns), the input first."""
    inputs, json_lines, quiet = (given.pop(name) for name in CLI_ONLY)
    columns = parse_methods(methods)
    if not inputs:
        raise UsageError("no input given; name images, folders, globs or - for paths on stdin")
    settings = build_settings(given)
    if len(settings.target.classes) > 1:
        raise UsageError("a comparison explains one class: give ⟨classes⟩ once (or not at all, for the top class)")
    streams = command_streams(ctx)
    as_json = (not streams.stdout_tty) if json_lines is None else json_lines
    return _Comparison(settings, streams, as_json, quiet).run(inputs, columns, parse_layers(layers))


def parse_layers(text: str) -> list[str] | None:
    """`layer2,layer3` → the dotted paths, each once; `stages` → None: every stage of the model."""
    if text.strip().lower() == STAGES:
        return None
    paths = [part.strip() for part in text.split(",")]
    if not all(paths):
        raise UsageError(f"--layers '{printable(text)}' has an empty path; give dotted paths, comma-separated, or '{STAGES}'")
    return list(dict.fromkeys(paths))


@dataclass(frozen=True)
class CompareRecord:
    """What `gradcam compare` says of one image: its grid, and where each cell of it is."""

    input: str
    ok: bool
    error: str | None = None
    model: str | None = None
    class_index: int | None = None
    class_name: str | None = None
    probability: float | None = None
    output: str | None = None
    rows: list[str] = field(default_factory=list)  # the layers, top to bottom
    columns: list[str] = field(default_factory=list)  # the methods, left to right
    cells: list[dict[str, Any]] = field(default_factory=list)  # row, col, layer, method, blank, box [x, y, w, h]

    def to_json(self) -> str:
        from gradcam_cli.outputs.records import utf8

        record = {k: utf8(v) if isinstance(v, str) else v for k, v in asdict(self).items()}
        return json.dumps(record, ensure_ascii=False, allow_nan=False)

    def human_line(self) -> str:
        if not self.ok:
            error = self.error or "failed"
            return f"✗ {error}" if names_input(error, self.input) else f"✗ {self.input}: {error}"
        name = f" {self.class_name}" if self.class_name else ""
        blank = sum(cell["blank"] for cell in self.cells)
        note = f"  ({blank} blank map{'s' if blank > 1 else ''}: no positive evidence there)" if blank else ""
        size = f"{len(self.rows)}x{len(self.columns)} (layers x methods)"
        return f"✓ {self.input} → {self.output}  class {self.class_index}{name} p={self.probability:.3f}  {size}{note}"

    def remarks(self) -> list[str]:
        """What stderr says of the image beside its JSON record: why it failed, which cells are blank."""
        if not self.ok:
            return [self.error or f"{self.input}: failed"]
        blank = [f"{cell['method']} @ {cell['layer']}" for cell in self.cells if cell["blank"]]
        return [f"{self.input}: blank maps (no positive evidence) for {', '.join(blank)}"] if blank else []


class _Comparison:
    """One run of `gradcam compare`: the model loaded once, the layers resolved, then each image's grid and record."""

    def __init__(self, settings: ExplainSettings, streams: Streams, as_json: bool, quiet: bool) -> None:
        self.settings, self.streams, self.as_json, self.quiet = settings, streams, as_json, quiet
        self.said: set[str] = set()
        self.claimed: set[Path] = set()  # the grids written so far
        self.inputs: set[Path] = set()  # every input, as it lies on disk: no grid may replace one

    def warn(self, message: str) -> None:
        """A remark on stderr, each said once, its option marks spelled as flags."""
        if message not in self.said:
            self.said.add(message)
            self.streams.warn(in_flags(message))

    def run(self, inputs: list[str], columns: list[str], paths: list[str] | None) -> int:
        from gradcam_cli.inputs.sources import iter_sources
        from gradcam_cli.outputs.naming import ensure_writable

        outputs = self.settings.outputs
        sources = list(iter_sources(inputs, self.streams.stdin, self.settings.inputs.recursive, outputs.output_dir, notice=self.warn))
        self.inputs = {place for source in sources for place in _places(source.path)}
        if all(source.error for source in sources):  # nothing to compare: no model load
            return self._finish([self._failed(source.path, source.error or "") for source in sources])
        ensure_writable(outputs.output_dir)
        model, rows = self._load(paths)
        records = []
        for source in sources:
            try:
                if source.error:
                    raise InputError(source.error)
                record = self._compare(model, source.path, source.relative, rows, columns)
            except InputError as error:  # explain() names an array input `<array>`: here it has its path
                record = self._failed(source.path, error.spelled(as_flag).replace("<array>", str(source.path), 1))
            self._report(record)
            records.append(record)
        return self._finish(records, reported=True)

    def _load(self, paths: list[str] | None) -> tuple[Any, list[str]]:
        """The model as explain() takes it, and the rows' layers, canonical; a bad layer stops here, before any image."""
        from gradcam_cli import api
        from gradcam_cli.layers.paths import resolve_layer
        from gradcam_cli.layers.stages import stage_paths
        from gradcam_cli.run.prepare import NO_PRETRAINED

        model = self.settings.model
        ready = api.load_model(
            model.name, model.weights, model.labels, pretrained=model.pretrained, device=self.settings.run.device,
            model_kwargs=dict(model.kwargs), ema=model.ema, output=model.output, **model.preprocessing(),
        )  # fmt: skip
        for notice in ready.notices:
            self.warn(notice)
        if not model.pretrained and model.weights is None:
            self.warn(NO_PRETRAINED)
        if paths is None:
            rows = stage_paths(ready.model, ready.arch, ready.source, notice=self.warn)
        else:
            rows = list(dict.fromkeys(resolve_layer(ready.model, path, ready.name).name for path in paths))
        return ready, rows

    def _compare(self, ready: Any, path: Path, relative: PurePath, rows: list[str], columns: list[str]) -> CompareRecord:
        """The image's cells, each as explain() gives it, drawn into the grid and written; its record."""
        import numpy as np

        from gradcam_cli.inputs.decode import load_image
        from gradcam_cli.outputs.files import write_atomic
        from gradcam_cli.outputs.grid import draw_grid
        from gradcam_cli.outputs.render import encode_png

        photo = load_image(path, self.settings.inputs.max_pixels)
        classes: Any = self.settings.target.classes[0] if self.settings.target.classes else None
        cells: list[list[Any]] = []
        first = None
        for layer in rows:
            cells.append([])
            for method in columns:
                explained = self._explain(photo, ready, layer, method, classes)
                first = explained if first is None else first
                classes = explained.class_index  # every cell explains the class of the first
                cells[-1].append(explained)
        assert first is not None
        name = first.class_name or f"class {first.class_index}"
        header = f"{name}  p={first.probability:.2f}  ·  {ready.name}"
        pictures = [[np.asarray(cell.overlay) for cell in row] for row in cells]
        grid = draw_grid(photo, pictures, rows=rows, columns=columns, header=header)
        output = self._output_path(path, relative)
        try:
            write_atomic(output, encode_png(grid.picture))
        except OSError as error:
            raise OutputError(f"cannot write {output}: {error.strerror or error}; choose another ⟨output_dir⟩") from None
        boxes = [
            {"row": r, "col": c, "layer": rows[r], "method": columns[c], "blank": bool(cells[r][c].targets[0].blank), "box": list(box)}
            for r, row in enumerate(grid.cells)
            for c, box in enumerate(row)
        ]
        return CompareRecord(
            input=str(path), ok=True, model=ready.name, class_index=first.class_index, class_name=first.class_name,
            probability=first.probability, output=str(output), rows=rows, columns=columns, cells=boxes,
        )  # fmt: skip

    def _explain(self, photo: Any, ready: Any, layer: str, method: str, classes: Any) -> Any:
        """One cell: explain() with the run's options; its warnings go to stderr, each once (fullgrad's: no layer)."""
        from gradcam_cli import api

        s = self.settings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            explained = api.explain(
                photo, ready, layers=layer, method=method, classes=classes, crop=s.inputs.crop, colormap=s.outputs.colormap.value,
                alpha=s.outputs.alpha, relu=s.maps.relu, norm=s.maps.norm.value, eigen_smooth=s.maps.eigen_smooth,
                aug_smooth=s.maps.aug_smooth, cam_batch_size=s.maps.cam_batch_size, grid=s.target.grid, precision=s.run.precision.value,
            )  # fmt: skip
        for warning in caught:
            self.warn(str(warning.message))
        return explained

    def _output_path(self, path: Path, relative: PurePath) -> Path:
        """`OUT/<sub-folders>/<stem>_compare.png`; the whole name when two inputs share a stem; never an input."""
        from gradcam_cli.outputs.naming import OutputNamer

        base = OutputNamer.base_for(relative)
        output = self.settings.outputs.output_dir / base.parent / f"{base.stem}_compare.png"
        if output in self.claimed:
            output = output.with_name(f"{base.name}_compare.png")
        if self.inputs & set(_places(output)):
            raise InputError(f"{path}: its grid {output} would overwrite an input of this run; choose another ⟨output_dir⟩")
        self.claimed.add(output)
        return output

    def _failed(self, path: Path, message: str) -> CompareRecord:
        return CompareRecord(input=str(path), ok=False, error=message or f"{path}: failed")

    def _report(self, record: CompareRecord) -> None:
        if self.as_json:
            for remark in record.remarks():
                self.streams.warn(remark)
            write_line(self.streams.stdout, record.to_json())
        else:
            write_line(self.streams.stdout, record.human_line())

    def _finish(self, records: list[CompareRecord], reported: bool = False) -> int:
        if not reported:
            for record in records:
                self._report(record)
        failed = sum(not record.ok for record in records)
        if not records:
            self.streams.warn(NO_IMAGE_FOUND)
            return ExitCode.SOME_INPUTS_FAILED
        if not self.quiet:
            where = f"; grids in {self.settings.outputs.output_dir}/" if failed < len(records) else ""
            self.streams.warn(f"compared {len(records) - failed} of {len(records)} images{f', {failed} failed' if failed else ''}{where}")
        return ExitCode.SOME_INPUTS_FAILED if failed else ExitCode.OK


def _places(path: Path) -> list[Path]:
    """Where a path's file lies: its own entry, and what a link points to."""
    try:
        return [path.parent.resolve() / path.name, path.resolve()]
    except (OSError, RuntimeError):
        return [path.absolute()]


compare.__signature__ = inspect.Signature(  # type: ignore[attr-defined]  # what typer reads: compare's two, then the table's
    [
        inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context),
        own_option("methods", "--methods", "gradcam", "M,M", "Columns: CAM methods, comma-separated (see `gradcam methods`)."),
        own_option(
            "layers", "--layers", STAGES, "PATH,PATH|stages", "Rows: dotted layer paths, comma-separated, or 'stages' for every stage."
        ),
        *(parameter(BY_NAME[name]) for name in TABLE_OPTIONS),
    ]
)
