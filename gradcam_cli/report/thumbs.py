"""Thumbnails: what lets a page of ten thousand cards open at once.

Each picture gets a JPEG of at most 256 px a side in `report/thumbs/`, named
from its path, so a report built again reuses what is still fresh (newer
than its picture). An overlay's thumbnail is fitted into its photo's
thumbnail size, letterboxed when its shape differs (side-by-side, a caption
band), so a card's two pictures line up. A detection's card shows its box
cut from the photo and from its map with a margin (a `Crop`): the same
pixels of both, each picture decoded once for all its boxes, at full scale.
A picture that cannot be read gets no thumbnail; the card says so and the
rest goes on.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from gradcam_cli.errors import InputError
from gradcam_cli.inputs.decode import load_image
from gradcam_cli.outputs.files import write_atomic

THUMB_SIDE = 256
THUMB_QUALITY = 85
LETTERBOX = (244, 244, 244)
MAX_SOURCE_PIXELS = 100_000_000  # as explain's --max-pixels default: a decompression bomb gets no thumbnail
CROP_MARGIN = 0.2  # around a box, a share of its longer side: the object and what touches it
CROP_MIN_MARGIN = 8  # pixels: a small box still shows its edges
CROP_ASPECT = 4 / 3  # a crop's sides at most this far apart: cards of tall and wide boxes stay alike
Fit = tuple[int, int] | None  # the size a thumbnail is fitted into (letterboxed), None: its own


@dataclass(frozen=True)
class Thumb:
    name: str  # relative to the report folder
    width: int
    height: int


@dataclass(frozen=True)
class Crop:
    """A box to show with a margin: x1, y1, x2, y2 in the photo's pixels, and the photo's width and height (None: the
    picture's own). A picture drawn side by side holds the map at its right end, where its crop is taken."""

    box: tuple[float, float, float, float]
    frame: tuple[int, int] | None = None

    def key(self) -> str:
        """A short name for the crop, part of its thumbnail's: the same box of the same photo, the same file."""
        return "c" + hashlib.sha1(repr((self.box, self.frame)).encode()).hexdigest()[:10]


def crop_region(crop: Crop, size: tuple[int, int]) -> tuple[int, int, int, int] | None:
    """The pixels (left, top, right, bottom) of a picture of `size` that show the box with its margin; None where the
    box is outside the photo."""
    width, height = size
    frame_w, frame_h = crop.frame or size
    offset = width - frame_w if width >= 2 * frame_w else 0  # side by side: the map is the picture's right end
    x1, x2 = max(0.0, min(crop.box[0], crop.box[2])), min(float(frame_w), max(crop.box[0], crop.box[2]))
    y1, y2 = max(0.0, min(crop.box[1], crop.box[3])), min(float(frame_h), max(crop.box[1], crop.box[3]))
    if x2 - x1 < 1 or y2 - y1 < 1:
        return None
    margin = max(CROP_MIN_MARGIN, CROP_MARGIN * max(x2 - x1, y2 - y1))
    side_w, side_h = x2 - x1 + 2 * margin, y2 - y1 + 2 * margin
    side_w, side_h = max(side_w, side_h / CROP_ASPECT), max(side_h, side_w / CROP_ASPECT)
    side_w, side_h = min(side_w, frame_w), min(side_h, frame_h)
    left = min(max(0.0, (x1 + x2 - side_w) / 2), frame_w - side_w)
    top = min(max(0.0, (y1 + y2 - side_h) / 2), frame_h - side_h)
    right, bottom = min(width, round(left + side_w) + offset), min(height, round(top + side_h))
    left, top = round(left) + offset, round(top)
    return (left, top, right, bottom) if right > left and bottom > top else None


def thumb_name(source: Path, kind: str) -> str:
    digest = hashlib.sha1(str(source.resolve()).encode("utf-8", "surrogateescape")).hexdigest()[:20]
    return f"thumbs/{digest}{kind}.jpg"


def _fresh(thumb: Path, source: Path) -> bool:
    try:
        return thumb.stat().st_mtime >= source.stat().st_mtime
    except OSError:
        return False


def _open(source: Path) -> Image.Image:
    """The picture as explain reads it (upright, 8-bit RGB, regular files only, the pixel guard), decoded at a
    reduced scale where JPEG allows: most of a thumbnail's time saved."""
    return Image.fromarray(load_image(source, MAX_SOURCE_PIXELS, at_least=(THUMB_SIDE * 2, THUMB_SIDE * 2)))


def make_thumb(report_dir: Path, source: Path, kind: str = "", box: Fit = None) -> Thumb | None:
    """The thumbnail of one picture (fitted into `box` when given), written unless a fresh one is there."""
    name = thumb_name(source, kind)
    try:
        return reused_thumb(report_dir, name, source, box) or write_thumb(report_dir, name, _open(source), box)
    except (InputError, OSError, ValueError, SyntaxError):  # a picture that cannot be read: none
        return None


def make_crops(report_dir: Path, source: Path, kind: str, crops: list[tuple[Crop, Fit]]) -> list[Thumb | None]:
    """The thumbnails of boxes cut from one picture (each fitted into its size when given), in the order of `crops`;
    the picture decoded once, at full scale, and only when one of them is not fresh."""
    names = [thumb_name(source, kind + crop.key()) for crop, _ in crops]
    thumbs = [reused_thumb(report_dir, name, source, fit) for name, (_, fit) in zip(names, crops)]
    if all(thumbs):
        return thumbs
    try:
        image = Image.fromarray(load_image(source, MAX_SOURCE_PIXELS))
    except (InputError, OSError, ValueError, SyntaxError):
        return thumbs
    for number, (name, (crop, fit)) in enumerate(zip(names, crops)):
        region = crop_region(crop, image.size)
        if thumbs[number] is None and region is not None:
            try:
                thumbs[number] = write_thumb(report_dir, name, image.crop(region), fit)
            except (OSError, ValueError):
                continue
    return thumbs


def reused_thumb(report_dir: Path, name: str, source: Path, box: Fit) -> Thumb | None:
    """The thumbnail already there when it is fresh and of the asked size."""
    target = report_dir / name
    try:
        if _fresh(target, source):
            with Image.open(target) as existing:
                if box is None or existing.size == box:
                    return Thumb(name, *existing.size)
    except (OSError, ValueError, SyntaxError):  # unreadable: made again
        pass
    return None


def write_thumb(report_dir: Path, name: str, image: Image.Image, box: Fit) -> Thumb:
    """The picture made a thumbnail (fitted into `box`, letterboxed, when given) and written."""
    image.thumbnail(box or (THUMB_SIDE, THUMB_SIDE), Image.Resampling.LANCZOS)
    if box is not None and image.size != box:
        canvas = Image.new("RGB", box, LETTERBOX)
        canvas.paste(image, ((box[0] - image.width) // 2, (box[1] - image.height) // 2))
        image = canvas
    target = report_dir / name
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(target, _jpeg(image))
    return Thumb(name, image.width, image.height)


def _jpeg(image: Image.Image) -> bytes:
    from io import BytesIO

    buffer = BytesIO()
    image.save(buffer, "JPEG", quality=THUMB_QUALITY, optimize=True)
    return buffer.getvalue()


def make_thumbs(report_dir: Path, jobs: Iterable[tuple[Path, str, Fit]], workers: int) -> list[Thumb | None]:
    """Many thumbnails at once (Pillow decodes and resizes outside the GIL), in the order of `jobs`."""
    jobs = list(jobs)
    if not jobs:
        return []
    with ThreadPoolExecutor(max(1, workers), thread_name_prefix="gradcam-thumbs") as pool:
        return list(pool.map(lambda job: make_thumb(report_dir, *job), jobs))


def make_crop_thumbs(report_dir: Path, jobs: Iterable[tuple[Path, str, list[tuple[Crop, Fit]]]], workers: int) -> list[list[Thumb | None]]:
    """The crops of many pictures at once, a picture to a thread, in the order of `jobs`."""
    jobs = list(jobs)
    if not jobs:
        return []
    with ThreadPoolExecutor(max(1, workers), thread_name_prefix="gradcam-thumbs") as pool:
        return list(pool.map(lambda job: make_crops(report_dir, *job), jobs))
