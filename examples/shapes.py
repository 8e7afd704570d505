"""Synthetic "one shape on clutter" scenes for testing Grad-CAM offline.

Each scene holds exactly one foreground shape whose class and bounding box are
known, so a heat map can be checked against ground truth (the "pointing
game") without downloading any data or weights.  The background is
deliberately cluttered (gradient, noise, thin lines, small specks) so that a
classifier cannot succeed by just finding "the only non-uniform region", yet
the clutter never contains anything shaped like a class at a similar size.

``make_detection_scene`` draws several such shapes (no two boxes touching) on
the same background, for training and checking the example object detector;
``make_segmentation_scene`` draws the same scenes with a per-pixel class mask,
for the example semantic segmenter.

Only numpy and Pillow are needed.
"""

from __future__ import annotations

import math

import numpy as np
from PIL import Image, ImageDraw

__all__ = ["CLASSES", "make_detection_scene", "make_moving_scene", "make_scene", "make_segmentation_scene", "shape_polygon"]

CLASSES: list[str] = ["circle", "square", "triangle", "star"]

# Shape size (circumscribed diameter) as a fraction of min(width, height).
_MIN_FRAC, _MAX_FRAC = 0.22, 0.38
# Clutter specks stay far below the smallest shape so they can't pass for one.
_MAX_SPECK_FRAC = 0.035
# Shapes sit upright (triangle/star point up, square axis-aligned) give or
# take this many degrees: full rotation makes the toy task needlessly slow to
# learn for a 0.4M-parameter CNN trained on CPU.
_MAX_TILT_DEG = 15.0
# Starting vertex angle that makes each class upright (image y axis points down).
_UPRIGHT = {"circle": 0.0, "square": math.pi / 4, "triangle": -math.pi / 2, "star": -math.pi / 2}


def shape_polygon(cls: int, cx: float, cy: float, r: float, angle: float) -> list[tuple[float, float]]:
    """Vertices of class ``cls`` centred at (cx, cy) with circumradius ``r``.

    The circle is returned as a fine polygon so every class goes through the
    same drawing and bounding-box code.
    """
    name = CLASSES[cls]
    if name == "circle":
        n, radii = 64, [r]
    elif name == "square":
        n, radii = 4, [r]
    elif name == "triangle":
        n, radii = 3, [r]
    elif name == "star":
        n, radii = 10, [r, 0.42 * r]
    else:  # pragma: no cover - CLASSES is fixed
        raise ValueError(cls)
    pts = []
    for k in range(n):
        a = angle + 2 * math.pi * k / n
        rad = radii[k % len(radii)]
        pts.append((cx + rad * math.cos(a), cy + rad * math.sin(a)))
    return pts


def _background(rng: np.random.Generator, width: int, height: int) -> tuple[Image.Image, np.ndarray]:
    """Gradient + noise + thin lines + small specks; returns image and mean colour."""
    c0 = rng.uniform(0, 255, 3)
    c1 = rng.uniform(0, 255, 3)
    theta = rng.uniform(0, 2 * math.pi)
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    t = xx * math.cos(theta) + yy * math.sin(theta)
    t = (t - t.min()) / max(float(np.ptp(t)), 1.0)
    img = c0[None, None, :] * (1 - t[..., None]) + c1[None, None, :] * t[..., None]
    img += rng.normal(0, rng.uniform(6, 22), (height, width, 3))
    mean = img.reshape(-1, 3).mean(0)
    pil = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB")

    draw = ImageDraw.Draw(pil)
    m = min(width, height)
    # Thin straight lines across the scene (edges, but no closed shapes).
    for _ in range(int(rng.integers(3, 9))):
        x0, x1 = rng.uniform(-0.2, 1.2, 2) * width
        y0, y1 = rng.uniform(-0.2, 1.2, 2) * height
        col = tuple(int(v) for v in rng.integers(0, 256, 3))
        draw.line([(x0, y0), (x1, y1)], fill=col, width=int(rng.integers(1, 3)))
    # Small specks (tiny ellipses/rectangles), well below shape size.
    smax = max(2.0, _MAX_SPECK_FRAC * m)
    for _ in range(int(rng.integers(10, 40))):
        cx, cy = rng.uniform(0, width), rng.uniform(0, height)
        rx, ry = rng.uniform(1, smax, 2) / 2
        col = tuple(int(v) for v in rng.integers(0, 256, 3))
        box = [cx - rx, cy - ry, cx + rx, cy + ry]
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)(box, fill=col)
    return pil, mean


def _contrasting_colour(rng: np.random.Generator, bg_mean: np.ndarray) -> tuple[int, int, int]:
    """A random colour far enough from the background mean to be visible."""
    for _ in range(100):
        col = rng.integers(0, 256, 3)
        if np.linalg.norm(col - bg_mean) > 120:
            break
    return tuple(int(v) for v in col)


def make_scene(
    rng: np.random.Generator,
    width: int,
    height: int,
    size_range: tuple[float, float] = (_MIN_FRAC, _MAX_FRAC),
) -> tuple[Image.Image, int, tuple[int, int, int, int]]:
    """Draw one random shape on a cluttered background.

    Returns ``(image, class_index, (x0, y0, x1, y1))``: an RGB image of size
    ``width x height``, the index into :data:`CLASSES`, and the shape's tight
    pixel bounding box (x1/y1 exclusive, as ``PIL.Image.getbbox``).  The shape
    spans roughly 20-40 % of ``min(width, height)`` and lies fully inside the
    image, so any aspect ratio works.  ``size_range`` (fractions of
    ``min(width, height)``) lets training mix in larger, easier shapes.
    """
    if width < 16 or height < 16:
        raise ValueError("scene must be at least 16x16 pixels")
    img, bg_mean = _background(rng, width, height)
    cls = int(rng.integers(len(CLASSES)))
    m = min(width, height)
    r = rng.uniform(*size_range) * m / 2
    cx = rng.uniform(r + 1, width - r - 1)
    cy = rng.uniform(r + 1, height - r - 1)
    tilt = math.radians(rng.uniform(-_MAX_TILT_DEG, _MAX_TILT_DEG))
    pts = shape_polygon(cls, cx, cy, r, _UPRIGHT[CLASSES[cls]] + tilt)

    return img, cls, _paste_shape(img, rng, pts, bg_mean)[0]


def _paste_shape(
    img: Image.Image, rng: np.random.Generator, pts: list[tuple[float, float]], bg_mean: np.ndarray
) -> tuple[tuple[int, int, int, int], Image.Image]:
    """Fill polygon ``pts`` with a contrasting colour, mildly textured so "flat colour" isn't the only cue.

    Returns its tight box and the 0/255 mask it was pasted through: exactly the
    pixels the shape covers, which a segmentation scene needs as its truth.
    """
    width, height = img.size
    mask = Image.new("L", (width, height), 0)
    ImageDraw.Draw(mask).polygon(pts, fill=255)
    colour = _contrasting_colour(rng, bg_mean)
    fg = np.asarray(colour, np.float32)[None, None, :] + rng.normal(0, 8, (height, width, 3))
    img.paste(Image.fromarray(np.clip(fg, 0, 255).astype(np.uint8), "RGB"), (0, 0), mask)
    bbox = mask.getbbox()
    assert bbox is not None
    return tuple(int(v) for v in bbox), mask  # type: ignore[return-value]


def _boxes_overlap(a: tuple[float, float, float, float], b: tuple[float, float, float, float], gap: float) -> bool:
    """True when boxes ``a`` and ``b`` come closer than ``gap`` pixels."""
    return a[0] < b[2] + gap and b[0] < a[2] + gap and a[1] < b[3] + gap and b[1] < a[3] + gap


def _check_scene_args(width: int, height: int, count_range: tuple[int, int]) -> None:
    """The scene makers' shared argument checks: a usable size and a count range of at least one shape."""
    if width < 16 or height < 16:
        raise ValueError("scene must be at least 16x16 pixels")
    lo, hi = count_range
    if not 1 <= lo <= hi:
        raise ValueError(f"count_range must satisfy 1 <= min <= max, got {count_range}")


def _place_shapes(
    img: Image.Image,
    rng: np.random.Generator,
    bg_mean: np.ndarray,
    count_range: tuple[int, int],
    size_range: tuple[float, float],
    max_tries: int,
) -> list[tuple[int, tuple[int, int, int, int], Image.Image]]:
    """Paste ``count_range[0]``..``count_range[1]`` shapes, boxes apart, onto ``img``.

    Returns ``(class_index, box, mask)`` per shape in drawing order (see
    :func:`make_detection_scene` for the placement rule).  One loop serves
    detection and segmentation scenes, so both draw the same shapes in the same
    random order: a given ``rng`` state gives the same shapes either way.
    """
    width, height = img.size
    m = min(width, height)
    shapes: list[tuple[int, tuple[int, int, int, int], Image.Image]] = []
    placed: list[tuple[float, float, float, float]] = []
    for _ in range(int(rng.integers(count_range[0], count_range[1] + 1))):
        cls = int(rng.integers(len(CLASSES)))
        for _ in range(max_tries):
            r = rng.uniform(*size_range) * m / 2
            cx, cy = rng.uniform(r + 1, width - r - 1), rng.uniform(r + 1, height - r - 1)
            tilt = math.radians(rng.uniform(-_MAX_TILT_DEG, _MAX_TILT_DEG))
            pts = shape_polygon(cls, cx, cy, r, _UPRIGHT[CLASSES[cls]] + tilt)
            xs, ys = [p[0] for p in pts], [p[1] for p in pts]
            box = (min(xs) - 1, min(ys) - 1, max(xs) + 1, max(ys) + 1)  # a little wider than the drawn pixels
            if not any(_boxes_overlap(box, b, gap=2) for b in placed):
                placed.append(box)
                shapes.append((cls, *_paste_shape(img, rng, pts, bg_mean)))
                break
    return shapes


def make_detection_scene(
    rng: np.random.Generator,
    width: int,
    height: int,
    count_range: tuple[int, int] = (1, 3),
    size_range: tuple[float, float] = (_MIN_FRAC, _MAX_FRAC),
    max_tries: int = 50,
) -> tuple[Image.Image, list[tuple[int, tuple[int, int, int, int]]]]:
    """Draw ``count_range[0]``..``count_range[1]`` shapes, boxes not overlapping, on clutter.

    Returns ``(image, [(class_index, (x0, y0, x1, y1)), ...])`` with tight pixel
    boxes (x1/y1 exclusive, as :func:`make_scene`), in drawing order.  Shapes
    and background come from the same helpers as :func:`make_scene`, so a
    detector trained here sees the same kind of shape a classifier does.  A
    placement whose box comes within 2 px of an earlier shape's is redrawn
    (at most ``max_tries`` times); if none fits, the scene keeps fewer shapes,
    but never fewer than one.  Deterministic for a given ``rng`` state.
    """
    _check_scene_args(width, height, count_range)
    img, bg_mean = _background(rng, width, height)
    shapes = _place_shapes(img, rng, bg_mean, count_range, size_range, max_tries)
    return img, [(cls, box) for cls, box, _ in shapes]


def make_segmentation_scene(
    rng: np.random.Generator,
    width: int,
    height: int,
    count_range: tuple[int, int] = (1, 3),
    size_range: tuple[float, float] = (_MIN_FRAC, _MAX_FRAC),
    max_tries: int = 50,
) -> tuple[Image.Image, np.ndarray]:
    """A detection scene with a per-pixel truth: ``(image, mask)``.

    ``mask`` is a uint8 ``(height, width)`` array of class indices: 0 for
    background, ``1 + k`` where shape ``CLASSES[k]`` was pasted (exactly the
    polygon's pixels, the same mask the colour went through).  Boxes keep 2 px
    apart, so no two shapes share a pixel.  Scenes are those of
    :func:`make_detection_scene`: for the same ``rng`` state and arguments the
    image is pixel for pixel the same.
    """
    _check_scene_args(width, height, count_range)
    img, bg_mean = _background(rng, width, height)
    mask = np.zeros((height, width), np.uint8)
    for cls, _, shape_mask in _place_shapes(img, rng, bg_mean, count_range, size_range, max_tries):
        mask[np.asarray(shape_mask) > 0] = cls + 1
    return img, mask


def make_moving_scene(
    rng: np.random.Generator, width: int, height: int, frames: int, cls: int | None = None
) -> tuple[list[Image.Image], int, list[tuple[int, int, int, int]]]:
    """One shape crossing a fixed cluttered background in a straight line: a clip's frames, its class, its box per frame.

    The shape keeps its size, colour and tilt and moves across the scene (left
    to right, a tenth of the width clear of either side, at a random height and
    slope), so a map
    that follows the object has a known place on every frame.  The background
    is drawn once: only the shape moves.  Deterministic for a given ``rng`` state.
    """
    background, bg_mean = _background(rng, width, height)
    cls = int(rng.integers(len(CLASSES))) if cls is None else cls
    r = rng.uniform(_MIN_FRAC, _MAX_FRAC) * min(width, height) / 2
    tilt = _UPRIGHT[CLASSES[cls]] + math.radians(rng.uniform(-_MAX_TILT_DEG, _MAX_TILT_DEG))
    y0, y1 = rng.uniform(r + 1, height - r - 1, 2)
    state = rng.bit_generator.state  # the same colour and texture on every frame
    images, boxes = [], []
    for t in np.linspace(0.0, 1.0, frames):
        image = background.copy()
        margin = r + 0.1 * width
        cx, cy = margin + t * (width - 2 * margin), y0 + t * (y1 - y0)
        rng.bit_generator.state = state
        boxes.append(_paste_shape(image, rng, shape_polygon(cls, cx, cy, r, tilt), bg_mean)[0])
        images.append(image)
    return images, cls, boxes


if __name__ == "__main__":  # quick visual check: python examples/shapes.py out.png
    import sys

    rng = np.random.default_rng(0)
    tiles = []
    for w, h in [(320, 240), (200, 300), (400, 260), (240, 240)] * 2:
        im, c, box = make_scene(rng, w, h)
        ImageDraw.Draw(im).rectangle(box, outline=(255, 0, 0))
        ImageDraw.Draw(im).text((4, 4), CLASSES[c], fill=(255, 255, 255))
        tiles.append(im.resize((240, 200)))
    sheet = Image.new("RGB", (240 * 4, 200 * 2))
    for i, t in enumerate(tiles):
        sheet.paste(t, ((i % 4) * 240, (i // 4) * 200))
    sheet.save(sys.argv[1] if len(sys.argv) > 1 else "shapes_sheet.png")
