"""Command-line inputs → an ordered stream of image paths with their output names.

Files, folders (optionally recursive), globs and `-` (paths on stdin, one per
line) are expanded lazily, so a pipeline can feed millions of paths without
the list ever being held. Each path carries the relative name its outputs
mirror under the output folder.
"""
from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Iterable, Iterator, TextIO

from .methods import method_names

IMAGE_SUFFIXES = frozenset(
    {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm", ".pbm", ".pnm", ".jfif"}
)
GLOB_CHARS = set("*?[")
# what OutputNamer writes: NAME.METHOD.png or NAME.METHOD.classN.png
OUTPUT_NAME = re.compile(r"\.(" + "|".join(re.escape(m) for m in method_names()) + r")(\.class\d+)?(\.guided)?\.png$")


@dataclass(frozen=True)
class Source:
    """One input: the path to read, the name its outputs mirror, or why it cannot be read."""

    path: Path
    relative: PurePath
    error: str | None = None


def _safe_relative(path: Path) -> PurePath:
    """The path as typed when it stays below the working folder, else its file name."""
    if not path.is_absolute() and ".." not in path.parts:
        parts = [p for p in path.parts if p not in (".", "")]
        if parts:
            return PurePath(*parts)
    return PurePath(path.name or "image")


def _is_inside(path: Path, folder: Path | None) -> bool:
    if folder is None:
        return False
    try:
        path.resolve().relative_to(folder)
        return True
    except (ValueError, OSError):
        return False


def _is_strictly_inside(inner: Path, outer: Path) -> bool:
    outer_resolved = outer.resolve()
    return inner != outer_resolved and _is_inside(inner, outer_resolved)


def _scan_folder(folder: Path, recursive: bool, skip: Path | None) -> Iterator[Source]:
    """Image files of a folder in sorted order; symlinked folders are not followed (no loops).

    The output folder is skipped when it lies inside the scanned folder, and
    our own overlays are skipped when the output folder is the scanned one, so
    a re-run neither explains nor overwrites its own outputs.
    """
    own_outputs = skip
    if skip is not None and not _is_strictly_inside(skip, folder):
        skip = None
    for root, dirs, files in os.walk(folder, followlinks=False):
        root_path = Path(root)
        dirs[:] = sorted(d for d in dirs if recursive and not _is_inside(root_path / d, skip))
        for name in sorted(files):
            path = root_path / name
            if path.suffix.lower() not in IMAGE_SUFFIXES or _is_inside(path, skip):
                continue
            if OUTPUT_NAME.search(name) and _is_inside(path, own_outputs):
                continue
            yield Source(path, PurePath(os.path.relpath(path, folder)))
        if not recursive:
            break


def expand_input(text: str, recursive: bool = False, skip: Path | None = None) -> Iterator[Source]:
    """One argument → its sources; a missing path or empty glob is an error source, not a crash."""
    path = Path(text)
    if path.is_dir():
        yield from _scan_folder(path, recursive, skip)
    elif path.exists() or path.is_symlink():
        yield Source(path, _safe_relative(path))
    elif GLOB_CHARS & set(text):
        matches = sorted(glob.glob(text, recursive=True))
        if not matches:
            yield Source(path, _safe_relative(path), f"{text}: the pattern matches no file")
        for match in matches:
            if Path(match).is_file():
                yield Source(Path(match), _safe_relative(Path(match)))
    else:
        yield Source(path, _safe_relative(path), f"{text}: no such file or folder")


def _stdin_lines(stream: TextIO) -> Iterator[str]:
    for line in stream:
        line = line.rstrip("\r\n")
        if line.strip():
            yield line


def iter_sources(
    inputs: Iterable[str], stdin: TextIO, recursive: bool = False, skip: Path | None = None
) -> Iterator[Source]:
    """All inputs in order; `-` reads paths from stdin lazily."""
    skip_resolved = skip.resolve() if skip is not None else None
    for text in inputs:
        if text == "-":
            for line in _stdin_lines(stdin):
                yield from expand_input(line, recursive, skip_resolved)
        else:
            yield from expand_input(text, recursive, skip_resolved)
