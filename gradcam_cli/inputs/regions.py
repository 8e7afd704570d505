"""Where the objects are: a `⟨boxes⟩` file of boxes, or a folder of mask PNGs, for the pointing game.

A box is `x0,y0,x1,y1` in the pixels of the picture as gradcam reads it
(upright): x0,y0 its top-left pixel, x1,y1 exclusive (its right and bottom
edges), as PIL's `getbbox`, numpy slices, torchvision's xyxy boxes and
examples/shapes.py's `make_scene` have them. A box covers columns x0..x1-1
and rows y0..y1-1, so x1 <= x0 is no box. Fractional coordinates cover every
pixel they touch. Pascal VOC's inclusive, 1-based xmin,ymin,xmax,ymax are
written xmin-1,ymin-1,xmax,ymax.

- CSV: `path,x0,y0,x1,y1[,class]` rows; a first row whose coordinates are
  words is a header; several rows of one image are several objects; row
  numbers in messages are the file's line numbers.
- JSON: `{"img.jpg": [[x0,y0,x1,y1], ...]}`, `{"img.jpg": [{"box": [...],
  "class": "cat"}]}`, or `[{"path": "img.jpg", "box": [...], "class": ...}]`.
- A folder of masks: one PNG per image, nonzero pixels the object, found by
  the image's path (below).

A class (a name or an index, as written) makes a region count only when that
class is the one explained. The files' paths find their images by the rule
`⟨truth⟩` files use (inputs/paths_table.py). A mask is found by the longest
tail of the image's path that its path in the folder spells (`masks/a/cat.png`
for `photos/a/cat.jpg`); its bare stem (`masks/cat.png`) only when no other
mask has it. A bad file is one UsageError line; per-image problems (a box
outside the picture, a mask of another size) are notices, and the rest counts.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from gradcam_cli.errors import GradcamError, UsageError, cut, one_line, option, printable
from gradcam_cli.inputs.cells import SHOWN, csv_rows, finite_number, read_text, shown
from gradcam_cli.inputs.decode import open_regular
from gradcam_cli.inputs.paths_table import PathTable

BOX_COLUMNS = ("x0", "y0", "x1", "y1")
FORMS = "give a CSV file of `path,x0,y0,x1,y1[,class]` rows, a JSON file of boxes, or a folder of mask PNGs"
ROW_HINT = "write one `path,x0,y0,x1,y1` row per object, optionally ending in `,class`"
ORDER_HINT = "a box is x0,y0,x1,y1: its left, top, right and bottom edges in pixels (x1, y1 exclusive), not x,y,width,height"
JSON_HINT = (
    'write {"img.jpg": [[x0, y0, x1, y1], ...]}, {"img.jpg": [{"box": [x0, y0, x1, y1], "class": "cat"}]} '
    'or [{"path": "img.jpg", "box": [x0, y0, x1, y1]}]'
)


@dataclass(frozen=True)
class Region:
    """One object of an image: a box or a mask PNG, the class it belongs to, and where the file says it."""

    box: tuple[int, int, int, int] | None  # x0, y0, x1, y1 in the original image's pixels, x1 and y1 exclusive
    mask: Path | None  # a mask PNG
    class_name: str | None  # counts only for this class (a name or an index as written), None: any class
    where: str  # "boxes.csv row 4", for messages


class _Lookup(Protocol):
    def find(self, path: Path) -> list[Region] | None: ...

    def unmatched(self, inputs: Iterable[Path]) -> list[str]: ...


class RegionTable:
    """The regions of each input, as a boxes file or a mask folder gives them."""

    def __init__(self, source: Path, lookup: _Lookup) -> None:
        self.source = source
        self._lookup = lookup

    def find(self, path: Path) -> list[Region] | None:
        """The regions of an input, None when the file names none (an empty list: it names the image, with no object)."""
        found = self._lookup.find(path)
        return list(found) if found is not None else None

    def unmatched(self, inputs: Iterable[Path]) -> list[str]:
        """The entries (as written) that name none of these inputs, for one warning line."""
        return self._lookup.unmatched(list(inputs))


def load_regions(spec: Path) -> RegionTable:
    """A CSV or JSON file of boxes, or a folder of mask PNGs; a bad file is a UsageError naming the file, row and fix."""
    spec = Path(spec)
    mark = option("boxes", printable(str(spec)))
    if spec.is_dir():
        return RegionTable(spec, _MaskFolder(spec))
    if not spec.exists():
        raise UsageError(f"{mark}: no such file or folder", hint=FORMS)
    kind = spec.suffix.lower()
    if kind not in (".csv", ".json"):
        raise UsageError(f"{mark}: not a .csv or .json file, nor a folder of masks", hint=FORMS)
    text = read_text(spec, mark, FORMS, named=False)
    entries = _csv_entries(spec, mark, text) if kind == ".csv" else _json_entries(spec, mark, text)
    if not entries:
        raise UsageError(f"{mark} names no image", hint=ROW_HINT if kind == ".csv" else JSON_HINT)
    groups: dict[str, tuple[str, list[Region]]] = {}
    for written, regions in entries:  # one image's rows, however spelled, are one entry: several objects
        groups.setdefault(os.path.normpath(written), (written, []))[1].extend(regions)
    table: PathTable[list[Region]] = PathTable()
    for written, regions in groups.values():
        table.add(written, regions, (spec.parent, Path.cwd()))
    return RegionTable(spec, table)


def _box(mark: str, values: Sequence[object]) -> tuple[int, int, int, int]:
    """x0,y0,x1,y1 checked: numbers, right of and below the top-left; fractions widened to the pixels they touch."""
    numbers = []
    for name, value in zip(BOX_COLUMNS, values):
        number = finite_number(value)
        if number is None:
            raise UsageError(f"{mark}: {name} is {shown(value)}, not a number", hint=ORDER_HINT)
        numbers.append(number)
    x0, y0, x1, y1 = numbers
    for low, high, low_name, high_name in ((x0, x1, "x0", "x1"), (y0, y1, "y0", "y1")):
        if high <= low:
            raise UsageError(f"{mark}: {high_name} ({high:g}) is not past {low_name} ({low:g}), so the box is empty", hint=ORDER_HINT)
    return math.floor(x0), math.floor(y0), math.ceil(x1), math.ceil(y1)


def _is_header(cells: Sequence[str]) -> bool:
    """`path,x0,y0,x1,y1,class` or any first row whose four coordinates are all words."""
    return len(cells) >= 5 and all(cell[:1].isalpha() and finite_number(cell) is None for cell in cells[1:5])


def _csv_entries(spec: Path, mark: str, text: str) -> list[tuple[str, list[Region]]]:
    return [
        (cells[0], [_csv_region(spec, f"{mark} row {number}", number, cells)])
        for number, cells in csv_rows(text, mark, ROW_HINT, _is_header)
    ]


def _csv_region(spec: Path, mark: str, number: int, cells: list[str]) -> Region:
    if len(cells) < 5:
        raise UsageError(f"{mark}: {len(cells)} column(s) ({shown(','.join(cells))}), a box needs 5", hint=ROW_HINT)
    if len(cells) > 6:
        raise UsageError(f"{mark}: {len(cells)} columns ({shown(','.join(cells))}), a box has at most 6", hint=ROW_HINT)
    if not cells[0]:
        raise UsageError(f"{mark}: no path in the first column", hint=ROW_HINT)
    class_name = cells[5] if len(cells) == 6 and cells[5] else None
    return Region(_box(mark, cells[1:5]), None, class_name, f"{spec.name} row {number}")


def _kind(value: object) -> str:
    """What a JSON value is, in words."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    names = {dict: "an object", list: "a list", str: "a string"}
    return next((name for kind, name in names.items() if isinstance(value, kind)), "a number")


def _json_entries(spec: Path, mark: str, text: str) -> list[tuple[str, list[Region]]]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise UsageError(f"{mark}: not valid JSON ({error.msg} at line {error.lineno} column {error.colno})", hint=JSON_HINT) from None
    except RecursionError:
        raise UsageError(f"{mark}: not valid JSON (nested too deep)", hint=JSON_HINT) from None
    if isinstance(data, dict):
        return [(key, _json_boxes(spec, mark, key, value)) for key, value in data.items()]
    if isinstance(data, list):
        return [_json_item(spec, mark, number, item) for number, item in enumerate(data, start=1)]
    raise UsageError(f"{mark}: the JSON is {_kind(data)}, not boxes by image", hint=JSON_HINT)


def _is_one_box(value: object) -> bool:
    return isinstance(value, list) and len(value) == 4 and all(finite_number(v) is not None and not isinstance(v, str) for v in value)


def _json_boxes(spec: Path, mark: str, key: str, value: object) -> list[Region]:
    """`"img.jpg": [[x0,y0,x1,y1], {"box": [...], "class": ...}, ...]`, or a single bare box."""
    label = f'"{cut(printable(key), SHOWN)}"'
    if not key.strip():
        raise UsageError(f"{mark}: an entry with an empty path", hint=JSON_HINT)
    if _is_one_box(value):
        value = [value]
    if not isinstance(value, list):
        raise UsageError(f"{mark} {label}: {_kind(value)}, not a list of boxes", hint=JSON_HINT)
    regions = []
    for number, item in enumerate(value, start=1):
        where = f"{label} box {number}"
        if isinstance(item, dict):
            regions.append(_json_region(spec, f"{mark} {where}", where, item))
        elif isinstance(item, list):
            regions.append(_json_region(spec, f"{mark} {where}", where, {"box": item}))
        else:
            raise UsageError(f"{mark} {where}: {_kind(item)} ({shown(item)}), not [x0, y0, x1, y1]", hint=JSON_HINT)
    return regions


def _json_item(spec: Path, mark: str, number: int, item: object) -> tuple[str, list[Region]]:
    """`{"path": "img.jpg", "box": [x0,y0,x1,y1], "class": ...}`, one item of the list form."""
    where = f"item {number}"
    path = item.get("path") if isinstance(item, dict) else None
    if not isinstance(item, dict) or not isinstance(path, str) or not path.strip():
        raise UsageError(f'{mark} {where}: {shown(item)} has no "path" string', hint=JSON_HINT)
    return path.strip(), [_json_region(spec, f"{mark} {where}", where, item)]


def _json_region(spec: Path, mark: str, where: str, item: dict[str, object]) -> Region:
    box, class_value = item.get("box"), item.get("class")
    if not isinstance(box, list) or len(box) != 4:
        found = f"box {shown(box)}" if "box" in item else f'no "box" (keys: {shown(", ".join(item))})'
        raise UsageError(f"{mark}: {found}, not [x0, y0, x1, y1]", hint=ORDER_HINT)
    if class_value is not None and (isinstance(class_value, bool) or not isinstance(class_value, (str, int))):
        raise UsageError(f"{mark}: class {shown(class_value)} is neither a class name nor an index", hint=JSON_HINT)
    class_name = str(class_value).strip() if class_value is not None else None
    return Region(_box(mark, box), None, class_name or None, f"{spec.name} {where}")


class _MaskFolder:
    """Mask PNGs found by the image's path: the longest tail of it that a mask's path in the folder spells.

    A tail is the image's folders and its stem (or its whole name, for
    `cat.jpg.png`); a mask's whole path in the folder wins over the tails of
    others, and a tail two masks share finds neither, so no image guesses.
    """

    def __init__(self, folder: Path) -> None:
        masks, shown = _pngs(folder), folder.name or folder.resolve().name
        if not masks:
            hint = "put one PNG per image there, named as the image (masks/cat.png for photos/cat.jpg), nonzero pixels the object"
            raise UsageError(f"{option('boxes', printable(str(folder)))}: a folder with no .png mask in it", hint=hint)
        self._regions: dict[tuple[str, ...], tuple[str, list[Region]]] = {}
        self._tails: dict[tuple[str, ...], tuple[str, ...] | None] = {}  # None: several masks share the tail
        for mask in masks:
            relative = mask.relative_to(folder)
            key = (*relative.parts[:-1], relative.name[: -len(relative.suffix)])
            self._regions[key] = (relative.as_posix(), [Region(None, mask, None, f"{shown}/{relative.as_posix()}")])
            for start in range(1, len(key)):
                self._tails[key[start:]] = key if key[start:] not in self._tails else None
        self._longest = max(len(key) for key in self._regions)

    def _key(self, path: Path) -> tuple[str, ...] | None:
        parts = Path(os.path.abspath(path)).parts
        for length in range(min(len(parts), self._longest), 0, -1):
            for last in dict.fromkeys((Path(parts[-1]).stem, parts[-1])):
                tail = (*parts[len(parts) - length : -1], last)
                if tail in self._regions:
                    return tail
                if self._tails.get(tail) is not None:
                    return self._tails[tail]
        return None

    def find(self, path: Path) -> list[Region] | None:
        key = self._key(path)
        return self._regions[key][1] if key is not None else None

    def unmatched(self, inputs: Iterable[Path]) -> list[str]:
        matched = {self._key(path) for path in inputs}
        return [written for key, (written, _) in self._regions.items() if key not in matched]


def _pngs(folder: Path) -> list[Path]:
    """Every .png file under the folder, in a stable order; symbolic links to folders are not followed (no loops)."""
    found = []
    for root, folders, files in os.walk(folder):
        folders.sort()
        found += [Path(root) / name for name in sorted(files) if name.lower().endswith(".png") and len(name) > 4]
    return sorted(path for path in found if path.is_file())


def object_mask(
    regions: Sequence[Region], size_hw: tuple[int, int], explained: Callable[[str], bool]
) -> tuple[np.ndarray | None, list[str]]:
    """The union of the regions that count for the explained class, as a bool (H,W) mask at the photo's size, and notices.

    explained(class_as_written) says whether a region's class is the explained
    one. A box partly outside the image is clipped, one wholly outside is left
    out, a mask of another size than the photo is left out: a notice each, and
    the rest still counts. None when no region counts.
    """
    height, width = size_hw
    union = np.zeros((height, width), dtype=bool)
    notices: list[str] = []
    for region in regions:
        if region.class_name is not None and not explained(region.class_name):
            continue
        notice = None
        if region.box is not None:
            notice = _paint_box(union, region.box, region.where)
        elif region.mask is not None:
            notice = _paint_mask(union, region.mask, region.where)
        if notice:
            notices.append(notice)
    return (union if union.any() else None), notices


def _paint_box(union: np.ndarray, box: tuple[int, int, int, int], where: str) -> str | None:
    height, width = union.shape
    x0, y0, x1, y1 = box
    clipped = (max(x0, 0), max(y0, 0), min(x1, width), min(y1, height))
    written = ",".join(map(str, box))
    if clipped[2] <= clipped[0] or clipped[3] <= clipped[1]:
        return f"{where}: box {written} lies wholly outside the {width}x{height} image, left out (coordinates of a resized copy?)"
    union[clipped[1] : clipped[3], clipped[0] : clipped[2]] = True
    if clipped != box:
        return f"{where}: box {written} reaches outside the {width}x{height} image, clipped to {','.join(map(str, clipped))}"
    return None


def _paint_mask(union: np.ndarray, path: Path, where: str) -> str | None:
    """A mask PNG's nonzero pixels added; its size is checked from the header, before anything is decoded."""
    from PIL import Image, UnidentifiedImageError

    height, width = union.shape
    try:
        with open_regular(path) as handle, Image.open(handle) as image:
            if image.size != (width, height):
                size = f"{image.size[0]}x{image.size[1]}"
                return f"{where}: the mask is {size} but the photo {width}x{height}, left out; save it at the photo's size"
            pixels = nonzero_pixels(image)
    except GradcamError as error:
        return f"{where}: {one_line(error.message, 200)}, left out"
    except (OSError, ValueError, SyntaxError, UnidentifiedImageError) as error:
        return f"{where}: cannot read the mask ({one_line(error, 120)}), left out"
    if not pixels.any():
        return f"{where}: the mask has no nonzero pixel, so no object"
    union |= pixels
    return None


def nonzero_pixels(image: object) -> np.ndarray:
    """(H,W) bool: the pixels that are not zero; with an alpha channel, a transparent pixel is background.

    The one reading of a binary mask: an object's here, a class's in a segmentation truth's class folders."""
    from PIL import Image

    assert isinstance(image, Image.Image)
    if image.mode in ("RGBA", "LA", "PA"):
        array = np.asarray(image.convert("LA" if image.mode == "LA" else "RGBA"))
        return (array[..., :-1] != 0).any(axis=2) & (array[..., -1] != 0)
    array = np.asarray(image)  # a palette image's indices: index 0 is the background, as in VOC's masks
    return (array != 0).any(axis=2) if array.ndim == 3 else array != 0
