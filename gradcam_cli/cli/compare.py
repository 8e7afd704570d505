"""`gradcam compare`: one grid per image, rows of layers by columns of methods (or of prompts), to see how the evidence forms.

The options come from the one option table (option_table.OPTIONS), built into
the signature as explain's are: every model option (derived from the table by
its group, so a new one reaches compare too), and the class, map and output
options that mean the same in a comparison; only `--methods` and `--layers`
are compare's own. Each cell is `gradcam_cli.explain()` of the image with that
method and layer on the model loaded once, so a cell is exactly the overlay
`gradcam explain --method M --layer L` writes. With several `--prompt`s on a
CLIP-style model the columns are the prompts, under one method: each cell the
map of `gradcam explain --prompt P --layer L` (cli/compare_cells.py). Bad
method or layer names stop the run before any image is explained (exit 2); a
bad image gets an error record and the others go on (exit 1). The run itself:
cli/compare_run.py.
"""

from __future__ import annotations

import inspect
from typing import Any

import typer

from gradcam_cli.cli.compare_cells import Columns
from gradcam_cli.cli.console import NO_INPUT_GIVEN
from gradcam_cli.cli.compare_record import CompareRecord, in_compare_flags
from gradcam_cli.cli.compare_run import Comparison
from gradcam_cli.cli.explain import command_streams
from gradcam_cli.cli.options import own_option, parameter, parse_methods
from gradcam_cli.errors import GradcamError, UsageError, printable
from gradcam_cli.settings import build_settings
from gradcam_cli.option_table import BY_NAME, OPTIONS

__all__ = ["CompareRecord", "compare", "parse_layers", "parse_methods"]

STAGES = "stages"
# every model option of the table, as explain takes them (the model, its weights, its builder's kwargs, its preprocessing)
MODEL_OPTIONS = tuple(option.name for option in OPTIONS if option.group == "model")
# the table's other options that mean the same in a comparison; --method and --layer become --methods and --layers, and
# what shapes explain's outputs (style, caption, raw maps, top-k, resume) or its streaming (batches, workers) is left out
TABLE_OPTIONS = (
    "inputs", *MODEL_OPTIONS, "classes", "prompts", "prompt_file", "template", "references", "crop", "relu", "norm", "eigen_smooth",
    "aug_smooth", "cam_batch_size", "grid", "colormap", "alpha", "output_dir", "recursive", "max_pixels", "device", "precision",
    "score_threshold", "max_detections", "min_area", "json_lines", "quiet",
)  # fmt: skip
CLI_ONLY = ("inputs", "json_lines", "quiet")


def compare(ctx: typer.Context, methods: str, layers: str, detection: int | None, **given: Any) -> int:
    """Write one grid per image: the maps of every --layers (rows) by every --methods (columns), the input first; with
    several --prompt, by every prompt."""
    try:
        if detection is not None and detection < 0:
            raise UsageError(f"--detection {detection}: must be 0 or more (0 is each image's highest-scoring detection)")
        inputs, json_lines, quiet = (given.pop(name) for name in CLI_ONLY)
        asked = parse_methods(methods)
        if not inputs:
            raise UsageError(NO_INPUT_GIVEN)
        settings = build_settings(given)
        if len(settings.target.classes) > 1:
            raise UsageError("a comparison explains one class: give ⟨classes⟩ once (or not at all, for the top class)")
        from gradcam_cli.run.matching import read_prompts

        columns = Columns.of(asked, read_prompts(settings.target), detection)
        streams = command_streams(ctx)
        as_json = (not streams.stdout_tty) if json_lines is None else json_lines
        from gradcam_cli.run.pipeline import model_prints_to_stderr

        sweep, paths = _swept(settings.model.weights, parse_layers(layers))
        with model_prints_to_stderr():  # stdout carries the records only, whatever the model's code prints
            return Comparison(settings, streams, as_json, quiet, detection).run(inputs, columns, paths, sweep)
    except GradcamError as error:
        raise in_compare_flags(error) from None


def _swept(weights: Any, paths: list[str] | None) -> tuple[list[Any] | None, list[str] | None]:
    """⟨weights⟩ as a pattern: its checkpoints are the rows, at one layer (⟨layers⟩ left at the stages: the model's
    default layer); several layers with them would be a third axis on a two-dimensional grid, refused in one line."""
    from gradcam_cli.inputs.checkpoints import swept_checkpoints

    sweep = swept_checkpoints(weights)
    if sweep is None:
        return None, paths
    if paths is not None and len(paths) > 1:
        raise UsageError(f"the {len(sweep)} checkpoints of ⟨weights~⟩ are the grid's rows, so it shows one layer: give one in ⟨layers⟩")
    return sweep, paths


def parse_layers(text: str) -> list[str] | None:
    """`layer2,layer3` → the dotted paths, each once; `stages` → None: every stage of the model."""
    if text.strip().lower() == STAGES:
        return None
    paths = [part.strip() for part in text.split(",")]
    if not all(paths):
        raise UsageError(f"--layers '{printable(text)}' has an empty path; give dotted paths, comma-separated, or '{STAGES}'")
    return list(dict.fromkeys(paths))


compare.__signature__ = inspect.Signature(  # type: ignore[attr-defined]  # what typer reads: compare's two, then the table's
    [
        inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context),
        own_option("methods", "--methods", "gradcam", "M,M", "Columns: CAM methods, comma-separated (see `gradcam methods`)."),
        own_option(
            "layers", "--layers", STAGES, "PATH,PATH|stages", "Rows: dotted layer paths, comma-separated, or 'stages' for every stage."
        ),
        own_option(
            "detection",
            "--detection",
            None,
            "N",
            "A detector: the cells explain each image's detection N (0, the default: its highest-scoring).",
            int,
        ),
        *(parameter(BY_NAME[name]) for name in TABLE_OPTIONS),
    ]
)
