"""The picture a person looks at: the map drawn over, beside or around the photo, and an optional caption.

On busy or similar-coloured photos the object vanishes under a jet overlay at
alpha 0.5, so `--style` also offers the map beside the untouched photo and
iso-lines of the map over it. `--caption` writes what the picture shows (class,
probability, method, layer) on a band under it, in Pillow's scalable default
font, sized from the picture so it stays legible from a thumbnail to a poster,
with the colour scale of the map (legend.py): the colour map, and what its ends mean.
"""

from __future__ import annotations

import numpy as np

from gradcam_cli.outputs.legend import Scale
from gradcam_cli.outputs.render import colorize, overlay
from gradcam_cli.vocab import Colormap, Style

CONTOUR_LEVELS = (0.2, 0.4, 0.6, 0.8)  # iso-lines of the map in [0, 1]: where the evidence climbs
MIN_TEXT_PX = 11  # below this a caption is not read, only seen
TEXT_FRACTION = 0.045  # caption height as a share of the picture's shorter side


def draw(
    image: np.ndarray,
    shown: np.ndarray,
    *,
    style: Style = Style.overlay,
    colormap: Colormap = Colormap.jet,
    alpha: float = 0.5,
    caption: str | None = None,
    scale: Scale | None = None,
) -> np.ndarray:
    """What an output PNG holds: the picture in its style, with its caption band when one is asked for (holding the
    colour scale, `scale` saying what its ends mean: render.display_scale)."""
    rgb = picture(image, shown, style=style, colormap=colormap, alpha=alpha)
    return captioned(rgb, caption, scale, colormap) if caption else rgb


def picture(
    image: np.ndarray, shown: np.ndarray, *, style: Style = Style.overlay, colormap: Colormap = Colormap.jet, alpha: float = 0.5
) -> np.ndarray:
    """The photo (H, W, 3 uint8) and its map (H, W in [0, 1]) as one RGB picture in the chosen style."""
    if style is Style.side_by_side:
        gap = np.full((image.shape[0], max(2, image.shape[1] // 100), 3), 255, np.uint8)
        return np.concatenate([np.ascontiguousarray(image, dtype=np.uint8), gap, colorize(shown, colormap)], axis=1)
    if style is Style.contour:
        return contour(image, shown, colormap)
    return overlay(image, shown, colormap, alpha)


def contour(image: np.ndarray, shown: np.ndarray, colormap: Colormap = Colormap.jet) -> np.ndarray:
    """Iso-lines of the map over the untouched photo, each in the colour map's colour of its level."""
    import cv2

    drawn = np.ascontiguousarray(image, dtype=np.uint8).copy()
    thickness = max(1, round(min(image.shape[:2]) / 200))
    levels = np.nan_to_num(shown).astype(np.float32)
    for level in CONTOUR_LEVELS:
        mask = (levels >= level).astype(np.uint8)
        lines, _ = cv2.findContours(mask, cv2.RETR_LIST, cv2.CHAIN_APPROX_NONE)
        colour = tuple(int(c) for c in colorize(np.array([[level]], np.float32), colormap)[0, 0])
        segments = [s for line in lines for s in _off_the_edge(line[:, 0, :], image.shape[:2])]
        cv2.polylines(drawn, segments, isClosed=False, color=colour, thickness=thickness, lineType=cv2.LINE_AA)
    return drawn


def _off_the_edge(points: np.ndarray, size: tuple[int, ...]) -> list[np.ndarray]:
    """A contour's runs of points inside the picture: where a region meets the border, the border is no iso-line."""
    height, width = size
    inside = (points[:, 0] > 0) & (points[:, 1] > 0) & (points[:, 0] < width - 1) & (points[:, 1] < height - 1)
    if inside.all():
        return [np.append(points, points[:1], axis=0).astype(np.int32)]  # a closed line, drawn closed
    cuts = np.flatnonzero(np.diff(inside.astype(np.int8)) != 0) + 1
    runs = np.split(points, cuts)
    flags = np.split(inside, cuts)
    return [run.astype(np.int32) for run, keep in zip(runs, flags) if keep[0] and len(run) > 1]


def captioned(rgb: np.ndarray, text: str, scale: Scale | None = None, colormap: Colormap = Colormap.jet) -> np.ndarray:
    """The picture with a dark band under it holding `text` in white, cut with '…' when it would not fit, and the colour
    scale of the map (`scale`: what its ends mean; None: ⟨norm=minmax⟩'s 0 to 1): on the text's line, right-aligned,
    when both fit whole; else on a line of its own under the text; left out on a picture too narrow to hold it."""
    from PIL import Image, ImageDraw

    from gradcam_cli.outputs.legend import MINMAX, draw_legend, legend_width
    from gradcam_cli.outputs.text import fitted, font

    height, width = rgb.shape[:2]
    size = max(MIN_TEXT_PX, round(min(height, width) * TEXT_FRACTION))
    face = font(size)
    margin = max(2, size // 3)
    room = width - 2 * margin
    scale = scale or MINMAX
    legend = legend_width(scale, size)
    beside = face.getlength(text) + 2 * margin + legend <= room
    below = not beside and legend <= room
    band = Image.new("RGB", (width, size + 2 * margin + (size + margin if below else 0)), (24, 24, 24))
    draw = ImageDraw.Draw(band)
    draw.text((margin, margin), fitted(text, face, room, nothing="…"), fill=(255, 255, 255), font=face)
    if beside or below:
        x, y = (width - margin - legend, margin) if beside else (margin, 2 * margin + size)
        draw_legend(band, x, y, size, scale, colormap, size, (255, 255, 255))
    return np.concatenate([np.ascontiguousarray(rgb, dtype=np.uint8), np.asarray(band)], axis=0)


def caption_text(
    class_name: str | None, class_index: int, probability: float | None, method: str, layers: list[str], what: str | None = None
) -> str:
    """What the picture shows, in one line: `tabby cat  p=0.83  gradcam @ layer4` (`what`: a regression's `output 0 = 3.2`)."""
    shown = what or f"{class_name or f'class {class_index}'}" + (f"  p={probability:.2f}" if probability is not None else "")
    return f"{shown}  {method} @ {', '.join(layers)}"
