"""The comparison grid of `gradcam compare`: one picture of one image's maps, rows of layers by columns of methods.

The layout, top to bottom and left to right:

    header      the class and its probability (and what the caller adds), and the
                colour scale (legend.py): on one line, or the scale on a line of its own
    labels      "input" over the first column, then each method over its column (or each
                prompt, on up to two lines, its note, a score, kept whole after it)
    rows        a gutter with the row's label (the layer, and a note: its map's
                resolution), then the first column, then one cell per method

The first column shows the input photo in the first row and is empty below
it, so the original is where the eye starts and every map lies in line with
the others of its layer and its method. Every cell is the photo's size scaled
so that its longest side is `cell` pixels (256 by default), the aspect kept; a
panorama (or a tall strip) grows until its short side is half a cell, its long
side at most four cells, so it is seen, not a sliver in white space; a
sliver thinner still sits centred in a slot of half a cell, so labels keep
room to be read. The fonts (Pillow's scalable default font,
nothing to install) are sized from `cell`, not from the grid, so a 2x2 grid and
a 6x8 one read alike; a label too long for its place is cut with '…', never
drawn past it. Pixels only: numpy and Pillow, no model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gradcam_cli.outputs.legend import MINMAX, Scale, draw_legend, legend_width
from gradcam_cli.outputs.text import fitted, font, one_line
from gradcam_cli.vocab import Colormap

import numpy as np

CELL = 256  # the longest side of every cell, in pixels
MIN_SLOT = 0.5  # a slot's short side is at least this share of `cell`: a sliver of a photo still gets a readable label
LONGEST = 4  # a panorama's cell is at most this many cells long: its short side grows to half a cell up to there
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
    legend: Box  # the colour scale, in the header band
    bar: Box  # its colours, 0 at the left to 1 at the right


def cell_size(photo_hw: tuple[int, int], cell: int = CELL) -> tuple[int, int]:
    """(width, height) of a cell for a photo of (height, width), the aspect kept: the longest side `cell`; a long thin
    photo (a panorama) grows until its short side is half a cell, its long side at most LONGEST cells."""
    height, width = photo_hw
    long, short = max(height, width), min(height, width)
    scale = cell / long
    if short * scale < cell * MIN_SLOT:
        scale = min(cell * MIN_SLOT / short, cell * LONGEST / long)
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
    notes: Sequence[str] | None = None,
    scale: Scale | None = None,
    colormap: Colormap = Colormap.jet,
    column_notes: Sequence[str] | None = None,
) -> Grid:
    """The grid of `cells[row][column]` (each an RGB picture of the photo's size) with its labels and the photo.

    `notes`: a few words after each row's label (its layer's map resolution, `7×7`); `scale`: what the ends of the
    colour bar in the header mean (None: ⟨norm=minmax⟩'s 0 to 1), the bar in `colormap`'s colours. `column_notes`: a
    few words after each column's label, never cut (a prompt's score; see noted_lines).
    """
    _check(photo, cells, rows, columns)
    from PIL import Image, ImageDraw

    notes = list(notes) if notes is not None else [""] * len(rows)
    layout = _Layout.of(photo.shape[:2], cell, [_noted(label, note) for label, note in zip(rows, notes)])
    left = layout.margin + layout.gutter
    width = left + (len(columns) + 1) * (layout.slot_w + layout.gap) - layout.gap + layout.margin
    head = _Header.plan(header, scale or MINMAX, layout, width - 2 * layout.margin)
    titles = _Titles.plan(columns, column_notes, layout)
    label_h = titles.height
    top = layout.margin + head.height + label_h
    height = top + len(rows) * (layout.slot_h + layout.gap) - layout.gap + layout.margin
    canvas = Image.new("RGB", (width, height), BACKGROUND)
    ink = ImageDraw.Draw(canvas)

    def slot(row: int, column: int) -> Box:  # column 0 is the input's, the maps' start at 1
        x = left + column * (layout.slot_w + layout.gap) + (layout.slot_w - layout.cell_w) // 2
        y = top + row * (layout.slot_h + layout.gap) + (layout.slot_h - layout.cell_h) // 2
        return x, y, layout.cell_w, layout.cell_h

    def paste(rgb: np.ndarray, box: Box) -> None:
        canvas.paste(Image.fromarray(fit_cell(rgb, (box[2], box[3]))), (box[0], box[1]))

    header_box, legend_box, bar = head.draw(canvas, ink, layout, colormap)
    label_y = layout.margin + head.height
    label_boxes = [(left + c * (layout.slot_w + layout.gap), label_y, layout.slot_w, label_h) for c in range(len(columns) + 1)]
    _write(ink, input_label, label_boxes[0], layout.text, centred=True)
    for lines, box in zip(titles.lines, label_boxes[1:]):
        _write_centred(ink, lines, box, layout.text)
    row_boxes = []
    for r, (label, note) in enumerate(zip(rows, notes)):
        row_boxes.append((layout.margin, top + r * (layout.slot_h + layout.gap), layout.gutter - layout.gap, layout.slot_h))
        _write_lines(ink, label, row_boxes[-1], layout.text, note)
    input_box = slot(0, 0)
    paste(photo, input_box)
    boxes = tuple(tuple(slot(r, c + 1) for c in range(len(columns))) for r in range(len(rows)))
    for row, row_cells in zip(boxes, cells):
        for box, rgb in zip(row, row_cells):
            paste(rgb, box)
    return Grid(np.asarray(canvas), boxes, input_box, header_box, label_boxes[0], tuple(label_boxes[1:]), tuple(row_boxes), legend_box, bar)


@dataclass(frozen=True)
class _Header:
    """The header's text and the colour scale: on one line when both fit whole, else the scale on a line of its own."""

    text: str
    scale: Scale
    legend_w: int
    beside: bool
    height: int

    @staticmethod
    def plan(text: str, scale: Scale, layout: _Layout, room: int) -> _Header:
        legend_w = legend_width(scale, layout.text)
        head_h = layout.band(layout.header_text)
        beside = font(layout.header_text).getlength(one_line(text)) + 2 * INSET + 2 * layout.gap + legend_w <= room
        return _Header(text, scale, legend_w, beside, head_h if beside else head_h + layout.band(layout.text))

    def draw(self, canvas: Any, ink: Any, layout: _Layout, colormap: Colormap) -> tuple[Box, Box, Box]:
        """The header drawn; its box, the legend's box and the colour bar's."""
        margin, room = layout.margin, canvas.width - 2 * layout.margin
        head_h = layout.band(layout.header_text)
        text_w = room - self.legend_w - 2 * layout.gap if self.beside else room
        _write(ink, self.text, (margin, margin, text_w, head_h), layout.header_text)
        line_y, line_h = (margin, head_h) if self.beside else (margin + head_h, self.height - head_h)
        legend = (margin + room - self.legend_w, line_y, self.legend_w, line_h)
        bar = draw_legend(canvas, legend[0], line_y, line_h, self.scale, colormap, layout.text, INK)
        return (margin, margin, room, self.height), legend, bar


@dataclass(frozen=True)
class _Titles:
    """The columns' labels as drawn: each its lines (one, cut with '…', without notes; up to two with them), and the
    height of their band, as many lines as the longest label's."""

    lines: tuple[tuple[str, ...], ...]
    height: int

    @staticmethod
    def plan(columns: Sequence[str], notes: Sequence[str] | None, layout: _Layout) -> _Titles:
        face, room = font(layout.text), layout.slot_w - 2 * INSET
        lines: tuple[tuple[str, ...], ...]
        if notes is None:
            lines = tuple((fitted(one_line(text), face, room),) for text in columns)
        elif len(notes) != len(columns):
            raise ValueError(f"column_notes must be one per column ({len(columns)}), not {len(notes)}")
        else:
            lines = tuple(tuple(noted_lines(text, note, layout.text, room, COLUMN_LINES)) for text, note in zip(columns, notes))
        extra = max(len(label) for label in lines) - 1
        return _Titles(lines, layout.band(layout.text) + max(0, extra) * sum(face.getmetrics()))


def _check(photo: np.ndarray, cells: Sequence[Sequence[np.ndarray]], rows: Sequence[str], columns: Sequence[str]) -> None:
    if photo.ndim != 3 or photo.shape[2] != 3 or photo.dtype != np.uint8:
        raise ValueError(f"the photo must be (H, W, 3) uint8, not {photo.shape} {photo.dtype}")
    if not rows or not columns or len(cells) != len(rows) or any(len(row) != len(columns) for row in cells):
        raise ValueError(f"cells must be {len(rows)} rows of {len(columns)} pictures, one per row and column label")
    for row in cells:
        for rgb in row:
            if rgb.shape != photo.shape:
                raise ValueError(f"every cell must have the photo's shape {photo.shape}, not {rgb.shape}")


def _write_centred(ink: Any, lines: Sequence[str], box: Box, size: int) -> None:
    """Lines already fitted to the box, each centred, the block centred on the box's height."""
    face = font(size)
    step = sum(face.getmetrics())
    y = box[1] + (box[3] - step * len(lines)) / 2
    for line in lines:
        ink.text((box[0] + (box[2] - face.getlength(line)) / 2, y), line, fill=INK, font=face)
        y += step


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


NOTE = " · "  # between a row's label and its note: `layer4 · 7×7`, a column's and its: `a photo of a dog · 27.31`
COLUMN_LINES = 2  # a column's label with a note (a prompt, its score) breaks onto at most this many lines


def noted_lines(text: str, note: str, size: int, width: int, most: int) -> list[str]:
    """A label and its note over at most `most` lines of `width` pixels: the label broken between words (a word too
    long for a line anywhere), the note after it on the last line, whole; what does not fit is cut with '…' before
    the note; a line too narrow for both holds the note alone, the label's lines before it (a note wider than the
    line alone is cut)."""
    face = font(size)
    rest, tail = one_line(text).strip(), (NOTE + one_line(note)) if note else ""
    lines: list[str] = []
    while rest and len(lines) < most - 1 and face.getlength(rest + tail) > width:
        head = _words_head(rest, face, width)
        if not head:
            break
        lines.append(head.rstrip())
        rest = rest[len(head) :].lstrip()
    room = width - face.getlength(tail)
    last = _cut_at_word(rest, face, room) if rest and room > 0 else ""
    if last or not tail:
        lines.append(last + tail)
    else:  # no room for the label beside its note: the note on a line of its own, the line before it cut
        if rest and lines:
            lines[-1] = _cut_at_word(f"{lines[-1]} {rest}", face, width)
        lines.append(fitted(tail.removeprefix(NOTE), face, width))
    return [line for line in lines if line]


def _cut_at_word(text: str, face: Any, width: float) -> str:
    """`text` cut with '…' to `width` pixels, between words where that keeps most of it (`next to a blue…`)."""
    shown = fitted(text, face, width)
    head = shown.removesuffix("…")
    cut = head.rfind(" ")
    return head[:cut].rstrip() + "…" if shown != text and cut > len(head) // 2 else shown


def _words_head(text: str, face: Any, width: int) -> str:
    """The longest head of `text` within `width` pixels, ending between words where one does (with its space)."""
    head = fitted(text, face, width)
    if head == text:
        return text
    head = head.removesuffix("…")
    cut = head.rfind(" ")
    return head[: cut + 1] if cut > 0 else head


def _noted(label: str, note: str) -> str:
    return f"{label}{NOTE}{note}" if note else label


def _write_lines(ink: Any, text: str, box: Box, size: int, note: str = "") -> None:
    """A row label in the gutter: as many lines as the row's height holds, the block centred on the row; the note
    after the label on its last line (`layer4 · 7×7`) or on a line of its own, never cut while a line fits."""
    face = font(size)
    ascent, descent = face.getmetrics()
    step = ascent + descent
    room, most = box[2] - 2 * INSET, box[3] // step
    shown = one_line(note)
    lines = wrapped(one_line(text), size, room, most - 1 if shown and most > 1 else most)
    if shown and lines and face.getlength(lines[-1] + NOTE + shown) <= room:
        lines[-1] += NOTE + shown
    elif shown and len(lines) < most:
        lines.append(fitted(shown, face, room))
    y = box[1] + (box[3] - step * len(lines)) / 2
    for line in lines:
        ink.text((box[0] + INSET, y), line, fill=INK, font=face)
        y += step
