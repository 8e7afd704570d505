"""Command-line inputs → an ordered stream of image paths with their output names.

Files, folders (optionally recursive), globs and `-` (paths on stdin, one per
line) are expanded lazily, so a pipeline can feed millions of paths without
the list ever being held. Nothing here opens a file but a folder's first
suffix-less file (is it a DICOM slice?), and only a regular file, without
blocking: types are read with stat, so a named pipe or a device can never
block the run. A folder of one DICOM series is one input (a volume). A path that no
file system could hold (a NUL byte, a name over 255 bytes) becomes an error
source of its own, and the rest go on.

Output names follow one rule, a function of the input's path alone (see
`output_relative`): the same file gets the same outputs however it was named.
"""

from __future__ import annotations

import glob
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import BinaryIO, TextIO
from collections.abc import Callable, Iterable, Iterator

from gradcam_cli.errors import InputError, printable
from gradcam_cli.inputs.decode import open_regular
from gradcam_cli.inputs.video import VIDEO_SUFFIXES
from gradcam_cli.inputs.volumes import is_nifti
from gradcam_cli.vocab import Method, values

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm", ".pbm", ".pnm", ".jfif"})
GLOB_CHARS = set("*?[")
# what OutputNamer writes: NAME.METHOD.png, NAME.METHOD.classN.png, NAME.METHOD[.classN].guided.png, compare's NAME.compare.png,
# a video's NAME.METHOD.mp4, a volume's NAME.METHOD.nii.gz
OUTPUT_NAME = re.compile(
    r"\.(" + "|".join(re.escape(m) for m in [*values(Method), "compare"]) + r")((\.class\d+)?(\.guided)?\.png|\.mp4|\.nii\.gz)$"
)
DICOM_SUFFIX = ".dcm"  # a folder holding such files is one input: a DICOM series (a volume)
NAME_MAX = 255  # bytes in one path component on ext4, XFS, btrfs, APFS, NTFS
PATH_MAX = 4096  # bytes in a whole path on Linux
STDIN_GIVE_UP = 1 << 20  # a "line" of a megabyte is no path list: stop reading stdin
SHOWN_CHARS = 80

Notice = Callable[[str], None]


@dataclass(frozen=True)
class Source:
    """One input: the path to read, the name its outputs mirror, or why it cannot be read."""

    path: Path
    relative: PurePath
    error: str | None = None


def shown(text: str) -> str:
    """A path as it may appear in a one-line message: control characters escaped, a long one cut at its start, since
    its end names the file (`…/run-7/photos/cat.jpg`, not `/tmp/pytest-of-root/…`)."""
    text = printable(text)
    return text if len(text) <= SHOWN_CHARS else "…" + text[len(text) - SHOWN_CHARS + 1 :]


def output_relative(path: Path) -> PurePath:
    """Where an input's outputs go below the output folder: its path relative to the current folder.

    The path is made absolute and normalised without following links; one
    below the current folder keeps its relative form (`photos/a/cat.jpg`),
    any other its absolute form without the root (`/data/cat.jpg` →
    `data/cat.jpg`). So an output name never depends on how the file was
    named (file, folder scan, glob, stdin) nor on the other inputs.
    """
    absolute = os.path.normpath(os.path.abspath(path))
    here = os.getcwd()
    relative = os.path.relpath(absolute, here) if absolute.startswith(here.rstrip(os.sep) + os.sep) else None
    parts = PurePath(relative).parts if relative else PurePath(absolute).parts[1:]
    return PurePath(*parts) if parts else PurePath("image")


def path_problem(text: str) -> str | None:
    """Why no file system could hold this path, or None: checked before any system call sees it."""
    if "\0" in text:
        return f"{shown(text)}: the path contains a NUL byte, which no file name can hold"
    encoded = os.fsencode(text)
    if len(encoded) >= PATH_MAX:
        return f"{shown(text)}: the path is {len(encoded):,} bytes, over the {PATH_MAX:,} a path may have"
    longest = max(encoded.split(b"/"), key=len)
    if len(longest) > NAME_MAX:
        return f"{shown(text)}: a name in the path is {len(longest)} bytes, over the {NAME_MAX} a file name may have"
    return None


def _error(path: Path, message: str) -> Source:
    return Source(path, output_relative(path), message)


def _stat(path: Path) -> os.stat_result | None:
    """The file's status following links, else the link's own (a broken link), else None."""
    for follow in (True, False):
        try:
            return os.stat(path, follow_symlinks=follow)
        except OSError:
            continue
    return None


DICOM_MAGIC_AT, DICOM_MAGIC = 128, b"DICM"  # a DICOM file's preamble, then its magic


def _holds_dicom(folder: Path, names: list[str]) -> bool:
    """Whether a folder's files are DICOM slices: `.dcm` names, or (exported without a suffix, as PACS often do) a
    first suffix-less file with DICOM's magic after its preamble; only a regular file is read, never blocking."""
    if any(name.lower().endswith(DICOM_SUFFIX) for name in names):
        return True
    bare = sorted(name for name in names if not PurePath(name).suffix and not name.startswith("."))
    if not bare:
        return False
    try:
        with open_regular(folder / bare[0]) as handle:
            handle.seek(DICOM_MAGIC_AT)
            return handle.read(len(DICOM_MAGIC)) == DICOM_MAGIC
    except (OSError, InputError):  # not a regular file, unreadable: no DICOM slice
        return False


def _is_inside(path: Path, folder: Path | None) -> bool:
    if folder is None:
        return False
    try:
        path.resolve().relative_to(folder)
        return True
    except (ValueError, OSError, RuntimeError):
        return False


class SourceScanner:
    """Expands the command line's inputs; remembers what it passed over, to say so once."""

    def __init__(self, recursive: bool = False, output_dir: Path | None = None, notice: Notice | None = None) -> None:
        self.recursive = recursive
        self.output_dir = output_dir.resolve() if output_dir is not None else None
        self.notice = notice or (lambda _m: None)
        self.own_outputs_skipped = 0

    # ------------------------------------------------------------ one input

    def expand(self, text: str) -> Iterator[Source]:
        """One argument → its sources; a missing path or empty glob is an error source, not a crash."""
        problem = path_problem(text)
        if problem:
            yield _error(Path(text.replace("\0", "\\0")), problem)
            return
        path = Path(text)
        status = _stat(path)
        if status is not None and stat.S_ISDIR(status.st_mode):
            yield from self._scan_folder(path)
        elif status is not None:
            yield from self._file(path)
        elif GLOB_CHARS & set(text):
            yield from self._glob(text)
        else:
            yield _error(path, f"{shown(text)}: no such file or folder")

    def _file(self, path: Path) -> Iterator[Source]:
        if self._is_own_output(path):
            return
        yield Source(path, output_relative(path))

    def _glob(self, pattern: str) -> Iterator[Source]:
        """The files a pattern matches, in order; one that matches none (or only folders) is an error source."""
        files = 0
        for match in sorted(glob.iglob(pattern, recursive=True)):
            status = _stat(Path(match))
            if status is not None and not stat.S_ISDIR(status.st_mode):
                files += 1
                yield from self._file(Path(match))
        if not files:
            yield _error(Path(pattern), f"{shown(pattern)}: the pattern matches no file")

    def _is_own_output(self, path: Path) -> bool:
        """An overlay this tool wrote into the output folder is never read back as an input."""
        if not OUTPUT_NAME.search(path.name) or not _is_inside(path, self.output_dir):
            return False
        if not self.own_outputs_skipped:
            self.notice(f"{shown(str(path))} and other gradcam outputs under {self.output_dir} are not inputs; skipped")
        self.own_outputs_skipped += 1
        return True

    # ------------------------------------------------------------ folders

    def _scan_folder(self, folder: Path) -> Iterator[Source]:
        """Image files of a folder in sorted order; symlinked folders are not followed (no loops).

        The output folder is skipped when it lies inside the scanned folder. A
        folder that cannot be read is an error source, never a silent gap, and
        so is a folder that holds no image file (as a missing file and a
        pattern that matches none are); sub-folders left out without -r are
        counted and said once.
        """
        given = 0
        for source in self._folder_files(folder):
            given += 1
            yield source
        if not given:
            yield _error(folder, f"{shown(str(folder))}: no image file in this folder")

    def _folder_files(self, folder: Path) -> Iterator[Source]:
        unreadable: list[OSError] = []
        skip = self.output_dir if self.output_dir is not None and self._strictly_inside(self.output_dir, folder) else None
        for root, dirs, files in os.walk(folder, onerror=unreadable.append, followlinks=False):
            yield from self._unreadable(unreadable)
            root_path = Path(root)
            if not self.recursive:
                self._say_subfolders(folder, [d for d in dirs if not _is_inside(root_path / d, skip)])
                dirs[:] = []
            else:
                dirs[:] = sorted(d for d in dirs if not _is_inside(root_path / d, skip))
            if _holds_dicom(root_path, files):  # a DICOM series: the folder is the input (a volume)
                yield from self._file(root_path)
                continue
            for name in sorted(files):
                path = root_path / name
                if path.suffix.lower() in IMAGE_SUFFIXES or path.suffix.lower() in VIDEO_SUFFIXES or is_nifti(path):
                    yield from self._file(path)
        yield from self._unreadable(unreadable)

    @staticmethod
    def _unreadable(errors: list[OSError]) -> Iterator[Source]:
        while errors:
            error = errors.pop(0)
            where = Path(error.filename or "?")
            yield _error(where, f"{shown(str(where))}: cannot read this folder ({error.strerror or error}); its images were not explained")

    def _say_subfolders(self, folder: Path, dirs: list[str]) -> None:
        if dirs:
            count = f"{len(dirs)} sub-folder{'s' if len(dirs) > 1 else ''}"
            example = shown(sorted(dirs)[0]) + (", ..." if len(dirs) > 1 else "")
            self.notice(f"{shown(str(folder))}: {count} not scanned ({example}); add -r to recurse")

    @staticmethod
    def _strictly_inside(inner: Path, outer: Path) -> bool:
        outer_resolved = outer.resolve()
        return inner != outer_resolved and _is_inside(inner, outer_resolved)

    # ------------------------------------------------------------ stdin

    def stdin(self, stream: TextIO | BinaryIO) -> Iterator[Source]:
        """Paths on stdin, one per line, each line bounded: a stream with no newline cannot fill memory."""
        for line_number, line in _bounded_lines(getattr(stream, "buffer", stream)):
            if isinstance(line, str):
                yield from self.expand(line)
            else:
                yield _error(Path(f"stdin line {line_number}"), line.message)


def read_ahead(stream: TextIO | BinaryIO) -> tuple[ReadAhead, bool]:
    """Wait for stdin's first path (or its end) before the model loads: (a stream that gives every line again,
    whether stdin holds any path). An empty stdin is then said at once, not after the model is built."""
    raw = getattr(stream, "buffer", stream)
    blank: str | bytes = ""
    count = 0  # blank lines before the first path: counted, not kept, so their numbers stay right
    while True:
        line = raw.readline(PATH_MAX + 1)
        text = line if isinstance(line, str) else os.fsdecode(line)
        if not line or text.lstrip("\ufeff").strip():
            return ReadAhead(raw, blank, count, line), bool(line)
        blank, count = line, count + 1


class ReadAhead:
    """A stream whose first lines were read ahead: they come again, then the rest as it comes."""

    def __init__(self, raw: TextIO | BinaryIO, blank: str | bytes, count: int, first: str | bytes) -> None:
        self._raw, self._blank, self._count, self._first = raw, blank, count, first

    def readline(self, limit: int = -1) -> str | bytes:
        if self._count:
            self._count -= 1
            return self._blank
        if self._first:
            first, self._first = self._first, self._first[:0]
            return first
        return self._raw.readline(limit)


@dataclass(frozen=True)
class _BadLine:
    message: str


def _bounded_lines(stream: TextIO | BinaryIO) -> Iterator[tuple[int, str | _BadLine]]:
    """Non-blank lines as file-system strings (undecodable bytes kept by surrogateescape).

    A line longer than any path is reported and skipped without being kept;
    after a megabyte with no newline the stream is not a list of paths, and
    reading stops with one error.
    """
    number = 0
    while True:
        line = stream.readline(PATH_MAX + 1)
        if not line:
            return
        number += 1
        raw = line if isinstance(line, bytes) else os.fsencode(line)
        if len(raw) > PATH_MAX and not raw.endswith(b"\n"):
            if not _skip_rest_of_line(stream):
                yield (
                    number,
                    _BadLine(
                        f"stdin line {number}: over {STDIN_GIVE_UP:,} bytes without a newline; "
                        "this is not a list of paths, stopped reading stdin"
                    ),
                )
                return
            yield number, _BadLine(f"stdin line {number}: longer than the {PATH_MAX:,} bytes a path may have; skipped")
            continue
        if number == 1 and raw.startswith(b"\xef\xbb\xbf"):  # a list saved by a Windows editor
            raw = raw[3:]
        text = os.fsdecode(raw.rstrip(b"\r\n"))
        if text.strip():
            yield number, text


def _skip_rest_of_line(stream: TextIO | BinaryIO) -> bool:
    """Read to the end of the line, keeping nothing; False when no newline came within STDIN_GIVE_UP."""
    read = 0
    while read < STDIN_GIVE_UP:
        chunk = stream.readline(65536)
        if not chunk or (chunk.endswith(b"\n") if isinstance(chunk, bytes) else chunk.endswith("\n")):
            return True
        read += len(chunk)
    return False


def named_files(inputs: Iterable[str], output_dir: Path | None = None) -> Iterator[Path]:
    """The files named on the command line that are inputs of the run (our own outputs are not).

    Known before any output is written, so none of them can be replaced by an
    output written earlier in the run; checked with stat only, never opened.
    """
    scanner = SourceScanner(output_dir=output_dir)
    for text in inputs:
        if text == "-" or path_problem(text):
            continue
        status = _stat(Path(text))
        if status is not None and stat.S_ISREG(status.st_mode) and not scanner._is_own_output(Path(text)):
            yield Path(text)


def iter_sources(
    inputs: Iterable[str],
    stdin: TextIO,
    recursive: bool = False,
    skip: Path | None = None,
    *,
    notice: Notice | None = None,
) -> Iterator[Source]:
    """All inputs in order; `-` reads paths from stdin lazily. `skip` is the output folder."""
    scanner = SourceScanner(recursive, skip, notice)
    for text in inputs:
        if text == "-":
            yield from scanner.stdin(stdin)
        else:
            yield from scanner.expand(text)
