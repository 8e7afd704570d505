"""Thumbnails: what lets a page of ten thousand cards open at once.

Each picture gets a JPEG of at most 256 px a side in `report/thumbs/`, named
from its path, so a report built again reuses what is still fresh (newer
than its picture). An overlay's thumbnail is fitted into its photo's
thumbnail size, letterboxed when its shape differs (side-by-side, a caption
band), so a card's two pictures line up. A picture that cannot be read gets
no thumbnail; the card says so and the rest goes on.
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


@dataclass(frozen=True)
class Thumb:
    name: str  # relative to the report folder
    width: int
    height: int


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


def make_thumb(report_dir: Path, source: Path, kind: str = "", box: tuple[int, int] | None = None) -> Thumb | None:
    """The thumbnail of one picture (fitted into `box` when given), written unless a fresh one is there."""
    name = thumb_name(source, kind)
    target = report_dir / name
    try:
        if _fresh(target, source):
            with Image.open(target) as existing:
                if box is None or existing.size == box:
                    return Thumb(name, *existing.size)
        image = _open(source)
        image.thumbnail(box or (THUMB_SIDE, THUMB_SIDE), Image.Resampling.LANCZOS)
        if box is not None and image.size != box:
            canvas = Image.new("RGB", box, LETTERBOX)
            canvas.paste(image, ((box[0] - image.width) // 2, (box[1] - image.height) // 2))
            image = canvas
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(target, _jpeg(image))
        return Thumb(name, image.width, image.height)
    except (InputError, OSError, ValueError, SyntaxError):  # the thumbnail already there unreadable too: none
        return None


def _jpeg(image: Image.Image) -> bytes:
    from io import BytesIO

    buffer = BytesIO()
    image.save(buffer, "JPEG", quality=THUMB_QUALITY, optimize=True)
    return buffer.getvalue()


def make_thumbs(report_dir: Path, jobs: Iterable[tuple[Path, str, tuple[int, int] | None]], workers: int) -> list[Thumb | None]:
    """Many thumbnails at once (Pillow decodes and resizes outside the GIL), in the order of `jobs`."""
    jobs = list(jobs)
    if not jobs:
        return []
    with ThreadPoolExecutor(max(1, workers), thread_name_prefix="gradcam-thumbs") as pool:
        return list(pool.map(lambda job: make_thumb(report_dir, *job), jobs))
