"""The comparison grid of `gradcam compare`: one picture of one image's maps, rows of layers by columns of methods.

The layout, top to bottom and left to right:

    header      the class and its probability (and what the caller adds), on one line
    labels      "input" over the first column, then each method over its column
    rows        a gutter with the row's label (the layer), then the first column,
                then one cell per method

The first column shows the input photo in the first row and is empty below
it, so the original is where the eye starts and every map lies in line with
the others of its layer and its method. Every cell is the photo's size scaled
so that its longest side is `cell` pixels (256 by default) whatever the
aspect; a very tall or very wide photo sits centred in a slot of at least half
that, so labels keep room to be read. The fonts (Pillow's scalable default font,
nothing to install) are sized from `cell`, not from the grid, so a 2x2 grid and
a 6x8 one read alike; a label too long for its place is cut with '…', never
drawn past it. Pixels only: numpy and Pillow, no model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gradcam_cli.outputs.text import fitted, font, one_line

import numpy as np

CELL = 256  # the longest side of every cell, in pixels
MIN_SLOT = 0.5  # a slot's short side is at least this share of `cell`: a sliver of a photo still gets a readable label
TEXT = 0.07  # label text height as a share of `cell` (18 px at 256)
HEADER = 1.3  # the header's text, this much larger than the labels'
GUTTER = 0.6  # the row labels' gutter, as a share of `cell`
MIN_TEXT_PX = 11  # below this a label is not read, only seen
BACKGROUND = (255, 255, 255)
INK = (28, 28, 28)
INSET = 2  # pixels between a label's box and its text: a glyph may reach a pixel left of where it is drawn

Box = tuple[int, int, int, int]  # x, y, width, height in pixels of the grid picture


@dataclass(frozen=True)
class Grid:
    """The drawn grid and where everything on it is: what records name and tests measure."""

    picture: np.ndarray  # (H, W, 3) uint8
    cells: tuple[tuple[Box, ...], ...]  # [row][column] of the maps: the drawn image's own pixels, no margin
    input: Box  # the photo, in the first column of the first row
    header: Box
    input_label: Box
    column_labels: tuple[Box, ...]
    row_labels: tuple[Box, ...]


def cell_size(photo_hw: tuple[int, int], cell: int = CELL) -> tuple[int, int]:
    """(width, height) of a cell for a photo of (height, width): the longest side `cell`, the aspect kept."""
    height, width = photo_hw
    scale = cell / max(height, width)
    return max(1, round(width * scale)), max(1, round(height * scale))


def fit_cell(rgb: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """A picture at a cell's (width, height), as the grid draws it: Pillow's bilinear filter, antialiased when shrinking."""
    from PIL import Image

    if (rgb.shape[1], rgb.shape[0]) == size:
        return np.ascontiguousarray(rgb, dtype=np.uint8)
    return np.asarray(Image.fromarray(np.ascontiguousarray(rgb, dtype=np.uint8)).resize(size, Image.Resampling.BILINEAR))


@dataclass(frozen=True)
class _Layout:
    """The grid's measures in pixels, all from the cell size."""

    cell_w: int
    cell_h: int
    slot_w: int
    slot_h: int
    gap: int
    margin: int
    gutter: int
    text: int
    header_text: int

    @staticmethod
    def of(photo_hw: tuple[int, int], cell: int, rows: Sequence[str]) -> _Layout:
        """The measures for this photo and cell size; the gutter as wide as the longest row label, up to its share."""
        cell_w, cell_h = cell_size(photo_hw, cell)
        least = round(cell * MIN_SLOT)
        text = max(MIN_TEXT_PX, round(cell * TEXT))
        gap = max(2, cell // 64)
        gutter = min(round(cell * GUTTER), math.ceil(max(font(text).getlength(one_line(label)) for label in rows)) + 2 * INSET + gap)
        return _Layout(cell_w, cell_h, max(cell_w, least), max(cell_h, least), gap, 2 * gap, gutter, text, round(text * HEADER))

    def band(self, size: int) -> int:
        """The height of a band holding one line of text of this size."""
        ascent, descent = font(size).getmetrics()
        return ascent + descent + size // 2


def draw_grid(
    photo: np.ndarray,
    cells: Sequence[Sequence[np.ndarray]],
    *,
    rows: Sequence[str],
    columns: Sequence[str],
    header: str,
    input_label: str = "input",
    cell: int = CELL,
) -> Grid:
    """The grid of `cells[row][column]` (each an RGB picture of the photo's size) with its labels and the photo."""
    _check(photo, cells, rows, columns)
    from PIL import Image, ImageDraw

    layout = _Layout.of(photo.shape[:2], cell, rows)
    head_h, label_h = layout.band(layout.header_text), layout.band(layout.text)
    left = layout.margin + layout.gutter
    top = layout.margin + head_h + label_h
    width = left + (len(columns) + 1) * (layout.slot_w + layout.gap) - layout.gap + layout.margin
    height = top + len(rows) * (layout.slot_h + layout.gap) - layout.gap + layout.margin
    canvas = Image.new("RGB", (width, height), BACKGROUND)
    ink = ImageDraw.Draw(canvas)

    def slot(row: int, column: int) -> Box:  # column 0 is the input's, the maps' start at 1
        x = left + column * (layout.slot_w + layout.gap) + (layout.slot_w - layout.cell_w) // 2
        y = top + row * (layout.slot_h + layout.gap) + (layout.slot_h - layout.cell_h) // 2
        return x, y, layout.cell_w, layout.cell_h

    def paste(rgb: np.ndarray, box: Box) -> None:
        canvas.paste(Image.fromarray(fit_cell(rgb, (box[2], box[3]))), (box[0], box[1]))

    header_box = (layout.margin, layout.margin, width - 2 * layout.margin, head_h)
    _write(ink, header, header_box, layout.header_text)
    label_y = layout.margin + head_h
    label_boxes = [(left + c * (layout.slot_w + layout.gap), label_y, layout.slot_w, label_h) for c in range(len(columns) + 1)]
    for text, box in zip([input_label, *columns], label_boxes):
        _write(ink, text, box, layout.text, centred=True)
    row_boxes = []
    for r, label in enumerate(rows):
        row_boxes.append((layout.margin, top + r * (layout.slot_h + layout.gap), layout.gutter - layout.gap, layout.slot_h))
        _write_lines(ink, label, row_boxes[-1], layout.text)
    input_box = slot(0, 0)
    paste(photo, input_box)
    boxes = tuple(tuple(slot(r, c + 1) for c in range(len(columns))) for r in range(len(rows)))
    for row, row_cells in zip(boxes, cells):
        for box, rgb in zip(row, row_cells):
            paste(rgb, box)
    return Grid(np.asarray(canvas), boxes, input_box, header_box, label_boxes[0], tuple(label_boxes[1:]), tuple(row_boxes))


def _check(photo: np.ndarray, cells: Sequence[Sequence[np.ndarray]], rows: Sequence[str], columns: Sequence[str]) -> None:
    if photo.ndim != 3 or photo.shape[2] != 3 or photo.dtype != np.uint8:
        raise ValueError(f"the photo must be (H, W, 3) uint8, not {photo.shape} {photo.dtype}")
    if not rows or not columns or len(cells) != len(rows) or any(len(row) != len(columns) for row in cells):
        raise ValueError(f"cells must be {len(rows)} rows of {len(columns)} pictures, one per row and column label")
    for row in cells:
        for rgb in row:
            if rgb.shape != photo.shape:
                raise ValueError(f"every cell must have the photo's shape {photo.shape}, not {rgb.shape}")


def _write(ink: Any, text: str, box: Box, size: int, centred: bool = False) -> None:
    """One line in the box, vertically centred, cut to its width."""
    face = font(size)
    shown = fitted(one_line(text), face, box[2] - 2 * INSET)
    ascent, descent = face.getmetrics()
    x = box[0] + (box[2] - face.getlength(shown)) / 2 if centred else box[0] + INSET
    ink.text((x, box[1] + (box[3] - ascent - descent) / 2), shown, fill=INK, font=face)


def wrapped(text: str, size: int, width: int, most: int) -> list[str]:
    """A dotted name over at most `most` lines of `width` pixels: broken after its dots, a part too long for a line
    broken anywhere, and the last line cut with '…' when the rest does not fit on it."""
    face = font(size)
    if most < 1 or not text or face.getlength(text[0]) > width:
        return []
    lines: list[str] = []
    for part in (piece + "." for piece in text.split(".")):
        while part:
            if lines and face.getlength(lines[-1] + part) <= width:
                lines[-1] += part
                break
            head = part
            while len(head) > 1 and face.getlength(head) > width:
                head = head[:-1]
            lines.append(head)
            part = part[len(head) :]
    lines[-1] = lines[-1][:-1]  # the dot added after the last part
    if len(lines) > most:  # the rest did not fit on one line, or it would be there: cut it
        lines = lines[: most - 1] + [fitted("".join(lines[most - 1 :]), face, width)]
    return [line for line in lines if line]


def _write_lines(ink: Any, text: str, box: Box, size: int) -> None:
    """A row label in the gutter: as many lines as the row's height holds, the block centred on the row."""
    face = font(size)
    ascent, descent = face.getmetrics()
    step = ascent + descent
    lines = wrapped(one_line(text), size, box[2] - 2 * INSET, box[3] // step)
    y = box[1] + (box[3] - step * len(lines)) / 2
    for line in lines:
        ink.text((box[0] + INSET, y), line, fill=INK, font=face)
        y += step
