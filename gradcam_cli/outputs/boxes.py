"""Boxes drawn on a picture: a detector's kept detections, each in its own colour with its class and score.

Sized from the picture (line width, label height), so a box reads the same on
a thumbnail and a 12-megapixel photo; a label that would leave the picture at
the top goes inside its box. A dashed box (a missed object) is drawn in
segments.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gradcam_cli.outputs.text import font, one_line

# Tableau's ten colours: told apart on a jet heat map and by most colour-blind readers
PALETTE = (
    (31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189),
    (140, 86, 75), (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207),
)  # fmt: skip
LABEL_FRACTION = 0.03  # label height as a share of the picture's shorter side
MIN_LABEL_PX = 10
DASH_FRACTION = 0.012  # a dash's length as a share of the shorter side


@dataclass(frozen=True)
class DrawnBox:
    """A box to draw: x1, y1, x2, y2 in the picture's pixels, its label, its colour's number, dashed or not."""

    box: tuple[float, float, float, float]
    label: str
    colour: int
    dashed: bool = False


def colour_of(number: int) -> tuple[int, int, int]:
    return PALETTE[number % len(PALETTE)]


def draw_boxes(picture: np.ndarray, boxes: list[DrawnBox]) -> np.ndarray:
    """The picture (H, W, 3 uint8) with each box and its label drawn over it."""
    from PIL import Image, ImageDraw

    canvas = Image.fromarray(np.ascontiguousarray(picture, dtype=np.uint8))
    pen = ImageDraw.Draw(canvas)
    height, width = picture.shape[:2]
    short = min(height, width)
    line = max(2, round(short / 250))
    face = font(max(MIN_LABEL_PX, round(short * LABEL_FRACTION)))
    for drawn in boxes:
        x1, y1, x2, y2 = (round(v) for v in drawn.box)
        colour = colour_of(drawn.colour)
        if drawn.dashed:
            _dashed(pen, (x1, y1, x2, y2), colour, line, max(4, round(short * DASH_FRACTION)))
        else:
            pen.rectangle((x1, y1, x2, y2), outline=colour, width=line)
        label_band(pen, face, one_line(drawn.label), (x1, y1, x2, y2), colour, (width, height))
    return np.asarray(canvas)


def label_band(
    pen: object,
    face: object,
    text: str,
    box: tuple[int, int, int, int],
    colour: tuple[int, int, int],
    size: tuple[int, int],
    taken: list[tuple[int, int, int, int]] | None = None,
) -> None:
    """The label on a filled band at the box's top edge: above it, or inside when the picture's top is too near; with
    `taken` (the bands drawn so far), moved down past any it would cover, and added to them."""
    left, top, right, bottom = pen.textbbox((0, 0), text, font=face)  # type: ignore[attr-defined]
    text_w, text_h = right - left, bottom - top
    pad = max(1, text_h // 4)
    x = min(max(0, box[0]), max(0, size[0] - text_w - 2 * pad))
    y = box[1] - text_h - 2 * pad if box[1] - text_h - 2 * pad >= 0 else box[1]
    band = (x, y, x + text_w + 2 * pad, y + text_h + 2 * pad)
    while taken is not None and any(_overlap(band, other) for other in taken) and band[3] + text_h + 2 * pad <= size[1]:
        band = (band[0], band[1] + text_h + 2 * pad, band[2], band[3] + text_h + 2 * pad)
    x, y = band[0], band[1]
    if taken is not None:
        taken.append(band)
    pen.rectangle(band, fill=colour)  # type: ignore[attr-defined]
    light = sum(colour) > 3 * 150
    pen.text((x + pad - left, y + pad - top), text, fill=(0, 0, 0) if light else (255, 255, 255), font=face)  # type: ignore[attr-defined]


def _overlap(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _dashed(pen: object, box: tuple[int, int, int, int], colour: tuple[int, int, int], width: int, dash: int) -> None:
    """A rectangle in dashes: each edge in segments of `dash` pixels, gaps as long."""
    x1, y1, x2, y2 = box
    edges = (((x1, y1), (x2, y1)), ((x2, y1), (x2, y2)), ((x2, y2), (x1, y2)), ((x1, y2), (x1, y1)))
    for (ax, ay), (bx, by) in edges:
        length = max(abs(bx - ax), abs(by - ay))
        for start in range(0, length, 2 * dash):
            end = min(length, start + dash)
            fx, fy = (bx - ax) / max(length, 1), (by - ay) / max(length, 1)
            pen.line((ax + fx * start, ay + fy * start, ax + fx * end, ay + fy * end), fill=colour, width=width)  # type: ignore[attr-defined]
