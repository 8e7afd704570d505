"""`gradcam report`: the HTML page of one or several runs, built from their records (report/)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gradcam_cli.cli.console import write_line
from gradcam_cli.cli.explain import command_streams
from gradcam_cli.errors import ExitCode, OutputError


def report(
    ctx: typer.Context,
    output_dir: Annotated[
        Path,
        typer.Argument(
            help="The output folder of an explain run (its records.jsonl); the report goes in OUT_DIR/report/.",
            metavar="OUT_DIR",
            show_default=False,
        ),
    ],
    records: Annotated[
        list[Path] | None,
        typer.Argument(
            help="More records: JSON Lines files (stdout of explain kept with >) or output folders; all are merged.",
            metavar="RECORDS",
            show_default=False,
        ),
    ] = None,
    workers: Annotated[int, typer.Option("--workers", min=0, help="Threads writing thumbnails; 0 = automatic.", metavar="N")] = 0,
) -> int:
    """Build OUT_DIR/report/index.html: a card per image and class, sorting, filters, per-class counts, a confusion matrix.

    It opens from file:// (no server). Ground truth (folders named after classes, or explain --truth) makes the
    page open on the images the model gets wrong.
    """
    from gradcam_cli.report.build import build_report

    streams = command_streams(ctx)
    try:
        index = build_report(output_dir, records or [], warn=streams.warn, workers=workers)
    except OSError as error:  # the report folder cannot be written: full disk, read-only, no permission
        raise OutputError(f"cannot write the report into {output_dir / 'report'}: {error.strerror or error}") from None
    write_line(streams.stdout, str(index))
    return ExitCode.OK
