"""Regions outlined on a picture: a segmenter's explained regions, each in its own colour with its class and area, and
an instance segmenter's masks, each in its detection's colour.

The outline follows the region's edge (OpenCV's contours of its pixels), sized
from the picture as boxes are (outputs/boxes.py), its label on a band at the
top of the region's bounding box (none for an empty label: a detection's mask,
whose box carries it); a missed region (truth says the class, the model does
not) is drawn in dashes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gradcam_cli.outputs.boxes import DASH_FRACTION, LABEL_FRACTION, MIN_LABEL_PX, colour_of, label_band
from gradcam_cli.outputs.text import font, one_line


@dataclass(frozen=True)
class DrawnRegion:
    """A region to outline: its pixels on the picture (H, W) bool, its label ("": none), its colour's number, dashed or not."""

    region: np.ndarray
    label: str
    colour: int
    dashed: bool = False


def draw_outlines(picture: np.ndarray, regions: list[DrawnRegion]) -> np.ndarray:
    """The picture (H, W, 3 uint8) with each region's outline and label drawn over it."""
    import cv2
    from PIL import Image, ImageDraw

    out = np.ascontiguousarray(picture, dtype=np.uint8).copy()
    height, width = out.shape[:2]
    short = min(height, width)
    line = max(2, round(short / 250))
    dash = max(4, round(short * DASH_FRACTION))
    corners = []
    for drawn in regions:
        contours, _ = cv2.findContours(drawn.region.astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_NONE)
        colour = colour_of(drawn.colour)
        if drawn.dashed:
            for contour in contours:
                points = contour[:, 0, :]
                for start in range(0, len(points), 2 * dash):
                    cv2.polylines(out, [points[start : start + dash + 1]], False, colour, line)
        else:
            cv2.drawContours(out, contours, -1, colour, line)
        ys, xs = np.nonzero(drawn.region)
        if len(xs) and drawn.label:
            corners.append((drawn, (int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1), colour))
    canvas = Image.fromarray(out)
    pen = ImageDraw.Draw(canvas)
    face = font(max(MIN_LABEL_PX, round(short * LABEL_FRACTION)))
    taken: list[tuple[int, int, int, int]] = []  # two regions labelled at one corner: the second band below the first
    for drawn, box, colour in corners:
        label_band(pen, face, one_line(drawn.label), box, colour, (width, height), taken)
    return np.asarray(canvas)
