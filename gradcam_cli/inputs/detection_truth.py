"""Ground truth for detectors: the boxes of each image's objects, from a COCO JSON file, a folder of YOLO labels or a CSV.

- COCO (`instances_val2017.json`, any `.json`): `images` [{id, file_name}],
  `annotations` [{image_id, category_id, bbox: [x, y, w, h]}], `categories`
  [{id, name}]; an image with no annotation has no objects. Crowd regions
  (`iscrowd: 1`) are left out: COCO's evaluation (pycocotools' COCOeval)
  neither counts a crowd a missed object nor a detection on it a false one.
- A folder of YOLO label files (inputs/yolo_labels.py): `class cx cy w h`
  lines, fractions of the image's size, turned into pixels once it is known.
  Without a names file the class index is the model's own.
- CSV: `path,class,x1,y1,x2,y2` rows (a header row is allowed), several rows
  per image; a row of only a path says the image has no objects.

A box is x1,y1,x2,y2 in the photo's own pixels (edges, as torchvision's xyxy
and COCO's x+w). Classes are read by the model's names (values.ClassIndex);
those the model lacks are collected, for one warning, and match no detection.
Paths find their images as ⟨truth⟩ files' do (inputs/paths_table.py). A file
that cannot be read is one UsageError line; a box is checked against its image
when that image is asked for, so a bad box elsewhere in a big file costs no run.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from gradcam_cli.errors import UsageError, cut, option, printable
from gradcam_cli.inputs.paths_table import PathTable
from gradcam_cli.inputs.truth import Truth, truth_of
from gradcam_cli.inputs.cells import csv_rows, finite_number, read_text, shown
from gradcam_cli.inputs.yolo_labels import YoloFolder, YoloLine
from gradcam_cli.values import ClassIndex

SLACK_PX = 1.0  # a box may pass its image's edge by this much (rounding in whatever wrote it); it is clipped to the edge
FORMS = "give a COCO JSON file (instances_*.json), a folder of YOLO label .txt files, or a CSV of `path,class,x1,y1,x2,y2` rows"
ROW_HINT = "write one `path,class,x1,y1,x2,y2` row per object (pixels: left, top, right, bottom), several rows per image"
COCO_HINT = (
    "a COCO file has `images` [{id, file_name}], `annotations` [{image_id, category_id, bbox: [x, y, w, h]}], `categories` [{id, name}]"
)
BOX_HINT = "boxes are in the image's own pixels: x1,y1,x2,y2 in a CSV, COCO's [x, y, width, height], YOLO's fractions 0..1"


@dataclass(frozen=True)
class TrueBox:
    """One object of an image: its box in the photo's pixels, its class as the truth names it, and the model's index."""

    box: tuple[float, float, float, float]  # x1, y1, x2, y2
    name: str  # the model's name for the class when it has it, else the truth's spelling
    index: int | None  # the model's class index, None when the model lacks the class


@dataclass(frozen=True)
class WrittenBox:
    """One object as the file writes it; checked, and for YOLO turned into pixels, once its image's size is known."""

    coords: tuple[float, float, float, float]  # x1, y1, x2, y2 in pixels; YOLO's cx, cy, w, h (fractions) when normalised
    normalised: bool
    truth: Truth
    where: str  # "row 4", "annotations[17]", "val/img.txt line 3": for messages


class _Lookup(Protocol):
    def find(self, path: Path) -> list[WrittenBox] | None: ...

    def unmatched(self, inputs: Iterable[Path]) -> list[str]: ...


class DetectionTruth:
    """The true boxes of each input, and the classes of the truth the model lacks (`unknown`, for one warning)."""

    def __init__(self, source: Path, lookup: _Lookup, unknown: Sequence[str] = ()) -> None:
        self.source = source
        self.unknown = list(unknown)
        self._lookup = lookup
        self._mark = option("truth", printable(str(source)))

    def of(self, path: Path, image_hw: tuple[int, int]) -> list[TrueBox] | None:
        """An image's objects in its pixels: None when the truth says nothing of it, [] when it says there are none."""
        written = self._lookup.find(path)
        return None if written is None else [self._checked(box, image_hw) for box in written]

    def unmatched(self, inputs: Iterable[Path]) -> list[str]:
        """The entries (as written) that name none of these inputs: a typo, a stale row, another split's labels."""
        return self._lookup.unmatched(list(inputs))

    def _checked(self, written: WrittenBox, image_hw: tuple[int, int]) -> TrueBox:
        """The box in pixels, inside its image (clipped within SLACK_PX of the edge); else one UsageError line."""
        height, width = image_hw
        x1, y1, x2, y2 = written.coords
        shown = f"({x1:g}, {y1:g}, {x2:g}, {y2:g})"
        if written.normalised:  # centre and size, as fractions of the width and height
            cx, cy, w, h = written.coords
            x1, y1, x2, y2 = (cx - w / 2) * width, (cy - h / 2) * height, (cx + w / 2) * width, (cy + h / 2) * height
            shown = f"cx,cy,w,h {cx:g} {cy:g} {w:g} {h:g} = ({x1:g}, {y1:g}, {x2:g}, {y2:g}) px"
        where = f"{self._mark} {written.where}: box {shown}"
        if x2 <= x1 or y2 <= y1:
            raise UsageError(f"{where} is empty (its right edge is not past its left, or its bottom past its top)", hint=BOX_HINT)
        if x1 < -SLACK_PX or y1 < -SLACK_PX or x2 > width + SLACK_PX or y2 > height + SLACK_PX:
            raise UsageError(f"{where} lies outside the {width}x{height} image", hint=BOX_HINT)
        box = (max(x1, 0.0), max(y1, 0.0), min(x2, float(width)), min(y2, float(height)))
        return TrueBox(box, written.truth.name, written.truth.index)


def holds_boxes(path: Path) -> bool:
    """Whether a ⟨truth⟩ is a detector's (COCO JSON, a YOLO folder, a CSV whose rows have boxes), not `path,class` rows:
    the command line checks the one it is before the model loads."""
    path = Path(path)
    if path.is_dir() or path.suffix.lower() in (".json", ".txt"):
        return True
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            rows = [row for _, row in zip(range(50), csv.reader(handle)) if any(cell.strip() for cell in row)]
    except (OSError, UnicodeDecodeError, csv.Error):
        return False  # the classifier's reader says what is wrong with it
    return any(len(row) >= 6 for row in rows)


def read_detection_truth(path: Path, classes: ClassIndex) -> DetectionTruth:
    """A COCO JSON file, a folder of YOLO labels or a CSV of boxes → each image's true boxes; a bad file is one line."""
    path = Path(path)
    mark = option("truth", printable(str(path)))
    if path.is_dir():
        return _yolo_truth(path, classes, mark)
    if not path.exists():
        raise UsageError(f"{mark}: no such file or folder", hint=FORMS)
    kind = path.suffix.lower()
    if kind == ".txt":
        raise UsageError(f"{mark}: one YOLO label file; give the folder of them (one `.txt` per image)", hint=FORMS)
    if kind == ".json":
        return _coco_truth(path, classes, mark)
    return _csv_truth(path, classes, mark)


def _table(path: Path, groups: Iterable[tuple[str, list[WrittenBox]]]) -> PathTable[list[WrittenBox]]:
    """Each image's boxes by its path as written, found from the file's folder or the current one."""
    table: PathTable[list[WrittenBox]] = PathTable()
    for written, boxes in groups:
        table.add(written, boxes, (path.parent, Path.cwd()))
    return table


def _unknown(boxes: Iterable[WrittenBox]) -> list[str]:
    """The truth's classes the model lacks, each once, in file order."""
    return list(dict.fromkeys(box.truth.name for box in boxes if box.truth.index is None))


# ------------------------------------------------------------------ YOLO


class _YoloLookup:
    """A YOLO folder's boxes by the image their label file belongs to."""

    def __init__(self, folder: YoloFolder, boxes: dict[str, list[WrittenBox]]) -> None:
        self._folder = folder
        self._boxes = boxes

    def find(self, path: Path) -> list[WrittenBox] | None:
        written = self._folder.label_for(path)
        return self._boxes[written] if written is not None else None

    def unmatched(self, inputs: Iterable[Path]) -> list[str]:
        return self._folder.unmatched(inputs)


def _yolo_truth(path: Path, classes: ClassIndex, mark: str) -> DetectionTruth:
    folder = YoloFolder(path, mark)
    boxes = {written: [_yolo_box(folder, classes, written, line) for line in folder.lines(written)] for written in folder.labels}
    return DetectionTruth(path, _YoloLookup(folder, boxes), _unknown(box for found in boxes.values() for box in found))


def _yolo_box(folder: YoloFolder, classes: ClassIndex, written: str, line: YoloLine) -> WrittenBox:
    """A label line's class read through the folder's names (an index into them) or the model's, its box kept as fractions."""
    where = f"{printable(written)} line {line.number}"
    spelling = line.spelling
    if folder.names is not None and spelling.isascii() and spelling.isdigit():
        if int(spelling) not in folder.names:
            raise UsageError(
                f"{folder.mark} {where}: class {cut(spelling, 20)} is past the {len(folder.names)} names of the folder's names file",
                hint="give each line a class index the names file lists, or the class name",
            )
        spelling = folder.names[int(spelling)]
    return WrittenBox((line.cx, line.cy, line.w, line.h), True, truth_of(classes, spelling, f"{folder.mark} {where}"), where)


# ------------------------------------------------------------------ COCO


def _coco_truth(path: Path, classes: ClassIndex, mark: str) -> DetectionTruth:
    try:
        data = json.loads(read_text(path, mark, COCO_HINT))
    except json.JSONDecodeError as error:
        raise UsageError(f"{mark}: not valid JSON ({error.msg} at line {error.lineno} column {error.colno})", hint=COCO_HINT) from None
    except RecursionError:
        raise UsageError(f"{mark}: not valid JSON (nested too deep)", hint=COCO_HINT) from None
    if not isinstance(data, dict):
        raise UsageError(f"{mark}: the JSON is no object, so not a COCO file", hint=COCO_HINT)
    files: dict[object, str] = {}
    for image_id, name in _coco_items(mark, data, "images", ("id", "file_name")):
        if not isinstance(name, str) or not name.strip():
            raise UsageError(f"{mark}: image id {shown(image_id)} has file_name {shown(name)}", hint=COCO_HINT)
        files[image_id] = name.strip()
    truths: dict[object, Truth] = {}
    for category_id, name in _coco_items(mark, data, "categories", ("id", "name")):
        if not isinstance(name, str) or not name.strip():
            raise UsageError(f"{mark}: category {shown(category_id)} has name {shown(name)}", hint=COCO_HINT)
        truths[category_id] = truth_of(classes, name, f"{mark} category {shown(category_id)}")
    boxes: dict[object, list[WrittenBox]] = {image_id: [] for image_id in files}
    annotations = data.get("annotations")
    if not isinstance(annotations, list):
        raise UsageError(f"{mark}: no `annotations` list, so no boxes", hint=COCO_HINT)
    for number, annotation in enumerate(annotations):
        found = _coco_box(mark, number, annotation, truths)
        if found is not None:
            image_id, box = found
            if image_id not in boxes:
                raise UsageError(f"{mark} {box.where}: image_id {shown(image_id)} is no image's id in `images`", hint=COCO_HINT)
            boxes[image_id].append(box)
    table = _table(path, ((files[image_id], found) for image_id, found in boxes.items()))
    return DetectionTruth(path, table, _unknown(box for found in boxes.values() for box in found))


def _coco_items(mark: str, data: dict[str, object], key: str, fields: tuple[str, str]) -> list[tuple[object, object]]:
    """The two fields of each item of a top-level list (`images`: id, file_name); one line for a missing one."""
    items = data.get(key)
    if not isinstance(items, list):
        raise UsageError(f"{mark}: no `{key}` list", hint=COCO_HINT)
    pairs = []
    for number, item in enumerate(items):
        if not isinstance(item, dict) or any(field not in item for field in fields):
            missing = ", ".join(field for field in fields if not isinstance(item, dict) or field not in item)
            raise UsageError(f"{mark} {key}[{number}]: no {missing} in {shown(item)}", hint=COCO_HINT)
        pairs.append((_key(item[fields[0]]), item[fields[1]]))
    return pairs


def _coco_box(mark: str, number: int, annotation: object, truths: dict[object, Truth]) -> tuple[object, WrittenBox] | None:
    """(image id, box) of one annotation, its [x, y, w, h] made x1,y1,x2,y2; None for a crowd region."""
    where = f"annotations[{number}]"
    wanted = ("image_id", "category_id", "bbox")
    if not isinstance(annotation, dict) or any(field not in annotation for field in wanted):
        missing = ", ".join(field for field in wanted if not isinstance(annotation, dict) or field not in annotation)
        raise UsageError(f"{mark} {where}: no {missing} in {shown(annotation)}", hint=COCO_HINT)
    if "id" in annotation:
        where += f" (id {cut(printable(str(annotation['id'])), 20)})"
    if annotation.get("iscrowd"):
        return None
    bbox = annotation["bbox"]
    numbers = [finite_number(value) for value in bbox] if isinstance(bbox, list) else []
    if len(numbers) != 4 or any(value is None for value in numbers):
        raise UsageError(f"{mark} {where}: bbox {shown(bbox)} is not [x, y, width, height] in pixels", hint=COCO_HINT)
    category = _key(annotation["category_id"])
    if category not in truths:
        raise UsageError(f"{mark} {where}: category_id {shown(category)} is no category's id in `categories`", hint=COCO_HINT)
    x, y, w, h = (float(value) for value in numbers if value is not None)
    return _key(annotation["image_id"]), WrittenBox((x, y, x + w, y + h), False, truths[category], where)


def _key(value: object) -> object:
    """An id as a dictionary key: a list (never an id, but JSON allows it) as its text, so a bad id is a message, not a crash."""
    return value if isinstance(value, (str, int, float, bool)) or value is None else json.dumps(value)


# ------------------------------------------------------------------ CSV


def _csv_truth(path: Path, classes: ClassIndex, mark: str) -> DetectionTruth:
    groups: dict[str, tuple[str, list[WrittenBox]]] = {}  # one image's rows, however its path is spelled, are one entry
    for number, cells in csv_rows(read_text(path, mark, ROW_HINT), mark, ROW_HINT, _is_header):
        written, box = _csv_row(mark, number, cells, classes)
        boxes = groups.setdefault(os.path.normpath(written), (written, []))[1]
        boxes.extend([box] if box is not None else [])
    if not groups:
        raise UsageError(f"{mark} has no rows", hint=ROW_HINT)
    table = _table(path, groups.values())
    return DetectionTruth(path, table, _unknown(box for _, found in groups.values() for box in found))


def _is_header(cells: Sequence[str]) -> bool:
    """`path,class,x1,y1,x2,y2`, or any first row whose four coordinates are all words."""
    return len(cells) == 6 and all(cell[:1].isalpha() and finite_number(cell) is None for cell in cells[2:6])


def _csv_row(mark: str, number: int, cells: list[str], classes: ClassIndex) -> tuple[str, WrittenBox | None]:
    """A row's path and box; a row of only a path (the rest empty) names an image without objects."""
    where = f"row {number}"
    if not cells[0]:
        raise UsageError(f"{mark} {where}: no path in the first column", hint=ROW_HINT)
    if not any(cells[1:]):
        return cells[0], None
    if len(cells) == 2:
        raise UsageError(f"{mark} {where}: `path,class` is a classifier's truth; a detector's needs each object's box", hint=ROW_HINT)
    if len(cells) != 6:
        raise UsageError(f"{mark} {where}: {len(cells)} columns ({shown(','.join(cells))}), not 6", hint=ROW_HINT)
    if not cells[1]:
        raise UsageError(f"{mark} {where}: no class in the second column", hint=ROW_HINT)
    numbers = []
    for name, cell in zip(("x1", "y1", "x2", "y2"), cells[2:]):
        value = finite_number(cell)
        if value is None:
            raise UsageError(f"{mark} {where}: {name} is {shown(cell)}, not a number", hint=ROW_HINT)
        numbers.append(value)
    truth = truth_of(classes, cells[1], f"{mark} {where}")
    return cells[0], WrittenBox((numbers[0], numbers[1], numbers[2], numbers[3]), False, truth, where)
