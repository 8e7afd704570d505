"""A folder of YOLO label files: which one belongs to an image, its lines read and checked, and the class names beside it.

Ultralytics lays a dataset out as `images/val/img.jpg` beside
`labels/val/img.txt`, and Roboflow's exports as `train/images/` beside
`train/labels/`, with README `.txt` files next to them; so where the folder
holds any `labels/` folder only the `.txt` files inside those are labels,
else every `.txt` in it (recursive) is, but `classes.txt`. A label file is
found by the image's stem; where several share it (`labels/train/img.txt`,
`labels/val/img.txt`) the one whose folders end as the image's do (its
`images` read as `labels`) wins, and a tie finds none, so no image guesses.

Each line is `class cx cy w h`, the box's centre and size as fractions of the
image's width and height (a sixth field, a prediction's confidence, is
allowed and ignored); an empty file is an image without objects. The class
is an index or a name; `names` in a `data.yaml` (Ultralytics) or the lines
of a `classes.txt` (darknet, labelImg) in the folder (or, for a `labels/`
folder, the one above it) turn an index into a name. Knowing nothing of
models, this module hands the class on as written.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from gradcam_cli.errors import UsageError, cut, one_line, printable
from gradcam_cli.inputs.cells import read_text

LINE_HINT = "a YOLO label line is `class cx cy w h`: a class index or name, then the box's centre and size as fractions 0..1"
NAMES_FILES = ("data.yaml", "data.yml", "classes.txt")  # the first one present gives the names
MAX_NAMES_BYTES = 1 << 20  # a names file lists classes: a megabyte is thousands of them


class YoloLine(NamedTuple):
    """One object of a label file, as written: the line's number, its class, and the normalised box."""

    number: int
    spelling: str  # the class field: an index, or a name
    cx: float
    cy: float
    w: float
    h: float


class YoloFolder:
    """The label files of a folder by the stem of their image, and the class names its names file gives."""

    def __init__(self, folder: Path, mark: str) -> None:
        self.folder = folder
        self.mark = mark
        self.names = class_names(folder, mark)  # index → name, None: the lines' indices are the model's
        self.labels = _label_files(folder)  # the files as written (relative to the folder, with /) → their paths
        if not self.labels:
            hint = "put one `.txt` label file per image there (labels/img.txt for images/img.jpg), one `class cx cy w h` line per object"
            raise UsageError(f"{mark}: a folder with no YOLO label (.txt) file in it", hint=hint)
        self._by_stem: dict[str, list[str]] = {}
        for written, path in self.labels.items():
            self._by_stem.setdefault(path.stem, []).append(written)

    def label_for(self, image: Path) -> str | None:
        """The label file (as written) of an image: the one of its stem, else the one whose folders end as the image's."""
        candidates = self._by_stem.get(image.stem, [])
        if len(candidates) <= 1:
            return candidates[0] if candidates else None
        wanted = ["labels" if part == "images" else part for part in Path(os.path.abspath(image)).parent.parts]
        scores = [_shared_tail(wanted, Path(os.path.abspath(self.labels[written])).parent.parts) for written in candidates]
        best = max(scores)
        return candidates[scores.index(best)] if scores.count(best) == 1 else None

    def unmatched(self, inputs: Iterable[Path]) -> list[str]:
        """The label files (as written) that no input finds: a typo or another split's labels, said once."""
        found = {self.label_for(path) for path in inputs}
        return [written for written in self.labels if written not in found]

    def lines(self, written: str) -> list[YoloLine]:
        """A label file's objects; a line that is no `class cx cy w h` is one UsageError naming the file and line."""
        text = read_text(self.labels[written], self.mark, LINE_HINT)
        objects = []
        for number, line in enumerate(text.splitlines(), start=1):
            fields = line.split()
            if fields:
                objects.append(_line(f"{self.mark} {printable(written)} line {number}", number, fields))
        return objects


def _line(where: str, number: int, fields: list[str]) -> YoloLine:
    """One line's fields checked: five (or six, with a confidence), the last four finite numbers."""
    if len(fields) not in (5, 6):
        shown = cut(printable(" ".join(fields)), 60)
        raise UsageError(f"{where}: {len(fields)} fields (`{shown}`), not 5", hint=LINE_HINT)
    numbers = []
    for name, field in zip(("cx", "cy", "w", "h"), fields[1:5]):
        try:
            value = float(field)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise UsageError(f"{where}: {name} is `{cut(printable(field), 20)}`, not a number", hint=LINE_HINT)
        numbers.append(value)
    return YoloLine(number, fields[0], *numbers)


def _shared_tail(one: list[str], other: tuple[str, ...]) -> int:
    """How many folders the two paths share at their ends."""
    shared = 0
    while shared < min(len(one), len(other)) and one[-1 - shared] == other[-1 - shared]:
        shared += 1
    return shared


def _label_files(folder: Path) -> dict[str, Path]:
    """Every label file under the folder, in a stable order (only those under `labels/` folders where there are any)."""
    found: list[Path] = []
    for root, folders, files in os.walk(folder):  # symbolic links to folders are not followed: no loops
        folders.sort()
        found += [Path(root) / name for name in sorted(files) if name.lower().endswith(".txt") and len(name) > 4]
    found = [path for path in found if path.is_file() and path != folder / "classes.txt"]
    in_labels = [path for path in found if "labels" in path.relative_to(folder).parts[:-1]]
    return {path.relative_to(folder).as_posix(): path for path in (in_labels or found)}


def class_names(folder: Path, mark: str) -> dict[int, str] | None:
    """The names of the dataset's class indices: `names` of a data.yaml, or a classes.txt's lines; None when there are none."""
    places = [folder, folder.parent] if folder.name == "labels" else [folder]
    for place in places:
        for name in NAMES_FILES:
            path = place / name
            if path.is_file():
                return _yaml_names(path, mark) if name != "classes.txt" else _text_names(path, mark)
    return None


def _text_names(path: Path, mark: str) -> dict[int, str]:
    """classes.txt: one class name a line, the first line class 0; trailing blank lines dropped."""
    names = [line.strip() for line in read_text(path, mark, "write one class name a line").splitlines()]
    while names and not names[-1]:
        names.pop()
    return dict(enumerate(names))


def _yaml_names(path: Path, mark: str) -> dict[int, str] | None:
    """data.yaml's `names`: a list, or a mapping of index to name (Ultralytics writes both); None when it has none."""
    import yaml

    hint = "give `names:` as a list of class names, or a mapping of index to name"
    if path.stat().st_size > MAX_NAMES_BYTES:
        raise UsageError(
            f"{mark}: {printable(str(path))} is over {MAX_NAMES_BYTES >> 20} MiB, too big for a list of class names", hint=hint
        )
    try:
        data = yaml.safe_load(read_text(path, mark, hint))
    except (yaml.YAMLError, ValueError, OverflowError, RecursionError) as error:
        raise UsageError(f"{mark}: {printable(str(path))} is not valid YAML ({one_line(error, 100)})", hint=hint) from None
    names = data.get("names") if isinstance(data, dict) else None
    if names is None:
        return None
    if isinstance(names, list) and all(isinstance(name, (str, int)) for name in names):
        return {index: str(name) for index, name in enumerate(names)}
    if isinstance(names, dict) and all(isinstance(key, int) and isinstance(name, (str, int)) for key, name in names.items()):
        return {key: str(name) for key, name in names.items()}
    raise UsageError(f"{mark}: the `names` of {printable(str(path))} are neither a list of names nor index: name pairs", hint=hint)
