"""What `gradcam explain` checks before the model loads: its inputs, stdin, the output folder and the truth file.

Building a model takes seconds (14-26 s for a large one), so every fault that
can be seen without it is said first: named files, folders and globs are
scanned (a scan stats, it opens nothing) and the files are read up to the
first one that is an image, stdin is read up to its first path, the output
folder is checked without being made, and a truth file's rows are read.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO, cast

from gradcam_cli.cli.console import Streams
from gradcam_cli.errors import GradcamError, OutputError
from gradcam_cli.option_words import as_flag
from gradcam_cli.settings import ExplainSettings

EMPTY_STDIN = "-: stdin gave no paths; pipe the paths of images to it, one per line"


def check_files(settings: ExplainSettings) -> None:
    """The output folder and the truth file, checked as far as they can be without the model."""
    truth = settings.inputs.truth
    if truth is not None:
        from gradcam_cli.inputs.detection_truth import holds_boxes, read_detection_truth
        from gradcam_cli.inputs.truth import truth_rows
        from gradcam_cli.values import ClassIndex

        if _holds_masks_only(truth):
            pass  # a segmenter's masks: read once the model says its classes (run/regions.py)
        elif holds_boxes(truth):
            read_detection_truth(truth, ClassIndex(None))  # a detector's boxes: a file that is none of its forms, one line now
        else:
            truth_rows(truth)  # no such file, not CSV, a row that is not `path,class`: one line now
    check_output_folder(settings.outputs.output_dir)


def _holds_masks_only(truth: Path) -> bool:
    """A folder of PNGs and no `.txt` labels: a segmenter's masks, not a YOLO label folder."""
    if not truth.is_dir():
        return False
    files = [p.suffix.lower() for _, p in zip(range(10_000), truth.rglob("*")) if p.is_file()]
    return ".png" in files and ".txt" not in files


def check_output_folder(folder: Path) -> None:
    """An output folder that cannot be one (a file, or a folder under a file) fails now; nothing is made yet, so a
    run that fails before its first image leaves no empty folder behind."""
    for place in (folder, *folder.parents):
        if not os.path.lexists(place):
            continue
        if not place.is_dir():
            at = "it" if place == folder else str(place)
            raise OutputError(f"cannot write to the output folder {folder}: {at} is a file, not a folder; choose another ⟨output_dir⟩")
        if not os.access(place, os.W_OK | os.X_OK):
            raise OutputError(f"cannot write to the output folder {folder}: permission denied on {place}; choose another ⟨output_dir⟩")
        return


def stdin_ahead(inputs: list[str], streams: Streams) -> tuple[list[str], Streams]:
    """With `-`, stdin read up to its first path: an empty stdin is said now and left out of the inputs (which may
    leave none); the streams read stdin on from where it began."""
    if "-" not in inputs:
        return inputs, streams
    from gradcam_cli.inputs.sources import read_ahead

    ahead, any_path = read_ahead(streams.stdin)
    streams = replace(streams, stdin=cast(TextIO, ahead))
    if any_path:
        return inputs, streams
    streams.warn(EMPTY_STDIN)
    return [text for text in inputs if text != "-"], streams


def input_sources(inputs: list[str], streams: Streams, settings: ExplainSettings, notice: Any, every: bool = False) -> Iterator[Any]:
    """The inputs this process explains: all of them, or with a shard its share (`every`: all the same)."""
    from gradcam_cli.inputs.shards import shard_of
    from gradcam_cli.inputs.sources import iter_sources

    found = iter_sources(inputs, streams.stdin, settings.inputs.recursive, skip=settings.outputs.output_dir, notice=notice)
    shard = None if every else shard_of(settings)
    return found if shard is None else (source for source in found if shard.owns(source))


@dataclass
class Scan:
    """The named inputs expanded once, before the model loads."""

    total: int = 0  # sources, failed ones included: the records the run will give
    videos: int = 0  # videos among them: a record each frame, so the records to come are not known ahead
    failed: int = 0
    elsewhere: int = 0  # sources that are another shard's
    problems: list[Any] = field(default_factory=list)  # the error sources, in input order
    notices: dict[str, None] = field(default_factory=dict)  # the scanner's remarks, each said once
    image_seen: bool = False  # a file read as an image: from there on, the run reads the rest

    @property
    def images(self) -> int:
        return self.total - self.failed

    def note(self, message: str) -> None:
        self.notices.setdefault(message, None)

    def tell(self, warn: Callable[[str], None], failed: Callable[[Any], None] | None = None) -> None:
        """The scanner's remarks, then the error sources to `failed` (None before a run: the run gives them their records)."""
        for message in self.notices:
            warn(message)
        for problem in self.problems:
            if failed is not None:
                failed(problem)


def _is_video(path: Path) -> bool:
    from gradcam_cli.inputs.video import is_video

    return is_video(path)


def scan_named(inputs: list[str], streams: Streams, settings: ExplainSettings) -> Scan:
    """Count what the named files, folders and globs hold (the progress bar's total), and read the files up to the
    first image: a run whose files are all no images (a text file named `.jpg`) fails without the model."""
    from gradcam_cli.inputs.shards import shard_of

    scan, shard = Scan(), shard_of(settings)
    for source in input_sources(inputs, streams, settings, notice=scan.note, every=True):
        if shard is not None and not shard.owns(source):
            scan.elsewhere += 1
            continue
        scan.total += 1
        scan.videos += source.error is None and _is_video(source.path)
        if source.error is None and not scan.image_seen:
            problem = _not_an_image(source.path, settings.inputs.max_pixels)
            source = replace(source, error=problem) if problem else source
            scan.image_seen = problem is None
        if source.error:
            scan.failed += 1
            scan.problems.append(source)
    return scan


def _not_an_image(path: Path, max_pixels: int) -> str | None:
    """Why this file cannot be explained, as the run would say it, or None: it is decoded as the run decodes it (a
    JPEG at its smallest draft size), once, for the first image only."""
    from gradcam_cli.inputs.decode import load_image
    from gradcam_cli.inputs.video import VideoReader, is_video
    from gradcam_cli.inputs.volume_slices import is_volume

    try:
        if is_video(path):  # opened as the run opens it: a file FFmpeg cannot read, or no PyAV, is said before the model
            VideoReader(path).close()
        elif is_volume(path):  # a NIfTI or a DICOM series: read whole by the run (its failures are the volume's line)
            return None
        else:
            load_image(path, max_pixels, at_least=(1, 1))
    except GradcamError as error:
        return error.spelled(as_flag)
    return None
