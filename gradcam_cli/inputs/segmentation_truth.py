"""Ground truth for segmentation models: each image's true class per pixel, from a folder of PNG masks (⟨truth⟩ FOLDER).

The folder is listed once, and its layout decided then, from where its PNGs lie:

- index masks, `FOLDER/<image's relative path or stem>.png`: a pixel is a
  class index. 8-bit (mode L, or P: a palette PNG such as Pascal VOC's
  SegmentationClass, whose raw indices are the classes; the palette's colours
  are never read) or 16-bit (I;16) for more than 256 classes. 255 in an 8-bit
  mask is void (VOC's object borders), ignored, when the model has fewer than
  256 classes. A mask in a sub-folder names its image by that path
  (`FOLDER/val/a.png` is `val/a`).
- class folders, `FOLDER/<class>/<image's relative path or stem>.png`: one
  folder per class, named by the class (any of its names, any case, as
  values.ClassIndex finds it) or by its index; a nonzero pixel (in colour:
  a coloured one not transparent, as ⟨boxes⟩ masks are read) is that class.
  A pixel no folder marks is class 0, the background of VOC- and ADE-style
  models, which no one draws, unless a folder of class 0 itself exists: then
  the truth draws class 0 too, and a pixel it leaves unmarked is unlabelled,
  ignored. A pixel the masks of two classes mark is ignored: the truth
  contradicts itself there.

The masks lie in class folders when every first-level folder holding PNGs
names a class and no PNG lies in FOLDER itself; they are index masks when no
such folder names a class. A folder of both kinds (a class's folder beside
masks or folders that name none) is one UsageError line naming some of each,
rather than a guess; so are index masks in split folders one of which is a
class's name (Cityscapes' `train/` beside `val/`): give the one split's folder.

A binary model (one class: class 0, "foreground") reads masks as binary in
either layout: nonzero (0/1 and 0/255 masks alike) is the foreground, zero the
background. Its masks lie in FOLDER itself (or in one folder naming class 0,
`foreground/` or `0/`). Class 0 being the foreground, the label map holds its
background as BINARY_BACKGROUND (1), a class the model does not have.

A label map is (H, W) int32: a class index per pixel, IGNORED (-1) where the
truth says nothing. A mask finds its image by the rules of ⟨truth⟩ files
(inputs/paths_table.py), its path below FOLDER (or below its class folder)
standing for the image's with any extension; where several masks share a
stem, the one whose path is the longest tail of the image's (`val/a` for
`/data/images/val/a.jpg`) wins, and a tie finds none, so no image guesses.
A mask is opened only when its image asks: a bad one is an InputError line
naming it, and costs that image alone. Hidden files and folders (`.DS_Store`,
`.ipynb_checkpoints`) hold no masks.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

import numpy as np

from gradcam_cli.errors import GradcamError, InputError, UsageError, cut, one_line, option, printable
from gradcam_cli.inputs.decode import open_regular
from gradcam_cli.inputs.paths_table import PathTable
from gradcam_cli.inputs.regions import nonzero_pixels
from gradcam_cli.values import ClassIndex

IGNORED = -1  # a pixel the truth says nothing of: void, unlabelled, contradicted
BINARY_BACKGROUND = 1  # a binary model's background in a label map: its one class, 0, is the foreground
VOID_8BIT = 255  # VOC's "void" in an 8-bit index mask, when the model has fewer than 256 classes
FOREGROUND = "foreground"  # a binary model's one class, by this name also when the model names it otherwise
INDEX_MODES = ("1", "L", "P", "I;16", "I;16B", "I;16L", "I;16N", "I")  # one value per pixel; "I": 16-bit in older Pillow
MAX_INDEX_DIGITS = 9  # a class folder's index: no model has a billion classes, and int() of 5,000 digits fails
SHOWN_FOLDERS = 3  # folders named in the message of a mixed layout

Layout = Literal["index masks", "class folders"]
FORMS = (
    "give a folder of index masks (FOLDER/<image>.png, a class index per pixel) "
    "or one folder per class (FOLDER/<class>/<image>.png, nonzero pixels that class)"
)
SIZE_HINT = "a truth mask must have its image's size"
MODE_HINT = "an index mask holds one class index per pixel: 8-bit gray or palette (VOC's), or 16-bit gray; not colours"


@dataclass(frozen=True)
class _Mask:
    """One mask file of an image, and in class folders the class it marks."""

    file: Path
    written: str  # its path below FOLDER, with /: what `unmatched` names
    index: int | None  # the class folder's class; None for an index mask


def holds_masks(path: Path) -> bool:
    """Whether a segmentation model's ⟨truth⟩ is a folder of masks (not a CSV or JSON file): it is a folder."""
    return Path(path).is_dir()


def read_segmentation_truth(folder: Path, class_names: Sequence[str] | None, num_classes: int) -> SegmentationTruth:
    """A folder of mask PNGs → each image's label map, read when asked; a folder that is none of the layouts is one line.

    `class_names` name the class folders (None: only indices do); `num_classes`
    is the model's count, which every class index must be below.
    """
    if num_classes < 1:
        raise ValueError(f"num_classes is {num_classes}; a segmentation model has at least one class")
    folder = Path(folder)
    mark = option("truth", printable(str(folder)))
    if not folder.is_dir():
        why = "a file, not a folder of mask PNGs" if folder.exists() else "no such folder"
        raise UsageError(f"{mark}: {why}", hint=FORMS)
    pngs = _listed(folder, mark)
    names, aliases = list(class_names or []), None
    if num_classes == 1:  # a binary model's one class: its own name, or "foreground"
        names, aliases = names[:1] or [FOREGROUND], [FOREGROUND]
    classes = ClassIndex(names, aliases)
    folders = _class_folders(pngs, lambda name: _class_of(name, classes, num_classes), mark)
    masks: dict[str, list[_Mask]] = {}
    for written in pngs:
        first, _, rest = written.partition("/")
        key = written if folders is None else rest
        key = str(PurePosixPath(key).with_suffix(".png"))  # `a.PNG` and `a.png` name one image
        found = masks.setdefault(key, [])
        if folders is not None or not found:  # an index mask: the first of `a.png`, `a.PNG`
            found.append(_Mask(folder / written, written, None if folders is None else folders[first]))
    layout: Layout = "index masks" if folders is None else "class folders"
    zero_drawn = folders is not None and 0 in folders.values()
    return SegmentationTruth(folder, layout, num_classes, masks, zero_drawn)


class SegmentationTruth:
    """The masks of a folder by the image they belong to, read into label maps when an image asks."""

    def __init__(self, folder: Path, layout: Layout, num_classes: int, masks: dict[str, list[_Mask]], zero_drawn: bool) -> None:
        self.folder = folder
        self.layout = layout
        self.num_classes = num_classes
        self.zero_drawn = zero_drawn  # class folders: one of class 0 exists, so an unmarked pixel is ignored
        self._masks = masks
        self._table: PathTable[str] = PathTable()
        self._stems: dict[str, list[str]] = {}
        for key in masks:
            self._table.add(key, key, (Path.cwd(),))
            self._stems.setdefault(PurePosixPath(key).stem, []).append(key)

    def __len__(self) -> int:
        """How many images the folder has masks of."""
        return len(self._masks)

    def of(self, path: Path, image_hw: tuple[int, int]) -> np.ndarray | None:
        """An image's (H, W) int32 label map, IGNORED (-1) where the truth says nothing; None when no mask names it.

        A mask of another size than the image, or holding a class the model
        does not have, is one InputError line naming the mask.
        """
        key = self._key(Path(path))
        if key is None:
            return None
        masks = self._masks[key]
        if self.layout == "class folders":
            return self._from_class_folders(masks, image_hw)
        pixels = _pixels(masks[0].file, image_hw, binary=self.num_classes == 1)
        if self.num_classes == 1:
            return np.where(pixels, 0, BINARY_BACKGROUND).astype(np.int32)
        return _labels(pixels, masks[0].file, self.num_classes)

    def unmatched(self, inputs: Iterable[Path]) -> list[str]:
        """The mask files (their paths below the folder) that name none of these inputs: a typo, another split's masks."""
        matched = {self._key(Path(path)) for path in inputs}
        return [mask.written for key, found in self._masks.items() if key not in matched for mask in found]

    def _key(self, path: Path) -> str | None:
        """The image's masks: its path (with any extension) or its unique name or stem, else the longest unique tail."""
        for query in (path, path.with_suffix(".png")):
            row = self._table.row(query)
            if row is not None:
                return row[1]
        parts = Path(os.path.abspath(path.with_suffix(""))).parts
        tails = {key: len(PurePosixPath(key).with_suffix("").parts) for key in self._stems.get(path.stem, [])}
        tails = {key: length for key, length in tails.items() if PurePosixPath(key).with_suffix("").parts == parts[-length:]}
        longest = max(tails.values(), default=0)
        best = [key for key, length in tails.items() if length == longest]
        return best[0] if len(best) == 1 else None

    def _from_class_folders(self, masks: list[_Mask], image_hw: tuple[int, int]) -> np.ndarray:
        """Each class's nonzero pixels; unmarked ones the background (see the module), doubly marked ones ignored."""
        unmarked = BINARY_BACKGROUND if self.num_classes == 1 else IGNORED if self.zero_drawn else 0
        owner = np.full(image_hw, IGNORED, dtype=np.int32)
        clash = np.zeros(image_hw, dtype=bool)
        for mask in masks:
            assert mask.index is not None, "a class folder's mask knows its class"
            marked = _pixels(mask.file, image_hw, binary=True)
            clash |= marked & (owner != IGNORED) & (owner != mask.index)
            owner[marked] = mask.index
        labels = np.where(owner != IGNORED, owner, unmarked).astype(np.int32)
        labels[clash] = IGNORED
        return labels


def _listed(folder: Path, mark: str) -> list[str]:
    """The PNG files below the folder (paths with /, sorted), hidden ones left out; none is one UsageError line."""
    try:
        os.listdir(folder)
    except OSError as error:
        raise UsageError(f"{mark}: cannot list the folder ({error.strerror or error})", hint=FORMS) from None
    pngs: list[str] = []
    others: list[str] = []
    for root, folders, files in os.walk(folder):  # symbolic links to folders are not followed: no loops
        folders[:] = sorted(name for name in folders if not name.startswith("."))
        for name in sorted(files):
            if name.startswith("."):
                continue
            written = Path(root, name).relative_to(folder).as_posix()
            is_png = name.lower().endswith(".png") and len(name) > 4
            (pngs if is_png else others).append(written)
    if pngs:
        return sorted(pngs)
    if others:
        some = f"{len(others)} other file(s), such as {cut(printable(others[0]), 60)}"
        raise UsageError(f"{mark}: a folder with no PNG mask, only {some}; a truth mask is a PNG (lossless)", hint=FORMS)
    raise UsageError(f"{mark}: an empty folder, no PNG mask in it", hint=FORMS)


def _class_of(name: str, classes: ClassIndex, num_classes: int) -> int | None:
    """The class a folder's name names: an index below the model's count, or a class name; None when none.

    Any other name is a folder of index masks (a scene's id of 30 digits, `val`), never an error."""
    if name.isascii() and name.isdigit():
        return int(name) if len(name) <= MAX_INDEX_DIGITS and int(name) < num_classes else None
    try:
        found = classes.find(name)
    except UsageError:  # digits of another script (`²`): no class's name
        return None
    return found if found is not None and found < num_classes else None


def _class_folders(pngs: Sequence[str], class_of: Callable[[str], int | None], mark: str) -> dict[str, int] | None:
    """The class of each first-level folder when the masks lie in class folders; None for index masks."""
    named: dict[str, int | None] = {}
    for written in pngs:
        first, slash, _ = written.partition("/")
        if slash and first not in named:
            named[first] = class_of(first)
    classy = [name for name, index in named.items() if index is not None]
    if not classy:
        return None
    other = [f"{name}/" for name, index in named.items() if index is None] + [written for written in pngs if "/" not in written]
    if other:
        raise UsageError(
            f"{mark} mixes class folders ({_some(classy, '/')}) with masks that are no class's ({_some(other, '')}): "
            "the folder is neither one folder per class nor index masks",
            hint=f"{FORMS}; for index masks in split folders (train/, val/), give the one split's folder",
        )
    return {name: index for name, index in named.items() if index is not None}


def _some(names: Sequence[str], end: str) -> str:
    """A few names of a list, and how many more, for a one-line message."""
    shown = ", ".join(cut(printable(name), 40) + end for name in names[:SHOWN_FOLDERS])
    return shown + (f" and {len(names) - SHOWN_FOLDERS} more" if len(names) > SHOWN_FOLDERS else "")


def _pixels(file: Path, image_hw: tuple[int, int], *, binary: bool) -> np.ndarray:
    """A mask's raw values (H, W) (palette indices, never colours), or its nonzero pixels when `binary`; its size
    checked from the header before anything is decoded. Any failure is one InputError line naming the file."""
    from PIL import Image, UnidentifiedImageError

    name = printable(str(file))
    height, width = image_hw
    try:
        with open_regular(file) as handle, Image.open(handle, formats=["PNG"]) as image:
            if image.size != (width, height):
                shape = f"{image.size[0]}x{image.size[1]}"
                raise InputError(f"mask {name} is {shape} but the image is {width}x{height}", hint=SIZE_HINT)
            if binary:
                return nonzero_pixels(image)
            if image.mode not in INDEX_MODES:
                raise InputError(f"mask {name} is a {image.mode} image", hint=MODE_HINT)
            return np.asarray(image)
    except GradcamError as error:
        raise InputError(error.message if error.message.startswith("mask ") else f"mask {error.message}", hint=error.hint) from None
    except FileNotFoundError:
        raise InputError(f"mask {name}: no such file (removed since the folder was listed?)") from None
    except PermissionError:
        raise InputError(f"mask {name}: permission denied") from None
    except UnidentifiedImageError:
        raise InputError(f"mask {name}: not a PNG image", hint="a truth mask is a PNG file") from None
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as error:
        raise InputError(f"mask {name}: cannot decode it ({one_line(error, 120)})") from None


def _labels(values: np.ndarray, file: Path, num_classes: int) -> np.ndarray:
    """An index mask's values as class indices, 8-bit 255 as IGNORED; a value past the model's classes is one line."""
    labels = values.astype(np.int32)
    if values.dtype in (np.uint8, np.bool_) and num_classes < 256:
        labels[values == VOID_8BIT] = IGNORED
        valid = labels[labels != IGNORED]
    else:
        valid = labels
    low, high = (int(valid.min()), int(valid.max())) if valid.size else (0, 0)
    wrong = low if low < 0 else high if high >= num_classes else None
    if wrong is not None:
        raise InputError(
            f"mask {printable(str(file))} holds class {wrong}; the model has {num_classes} classes (0..{num_classes - 1})",
            hint="a pixel of an index mask is a class index of the model (255 in an 8-bit mask: void)",
        )
    return labels
