"""Charts as pixels for `gradcam eval`: deletion, insertion and sanity curves (outputs/bar_chart.py: the summary's bars).

Pillow only, no matplotlib at run time. Everything, text too, is drawn SCALE times larger and each SCALE x SCALE
block averaged into one pixel (supersampling: as smooth as a LANCZOS shrink, 14 times faster), so lines, bands
and glyphs come out anti-aliased. A method's colour comes from a fixed palette by the order names first appear,
so the same name order gives the same colours in every chart; baselines are greys, dashed in curves and hatched
in bars. Methods whose curves would be drawn on top of each other (gradcam and xgradcam often have the same maps)
take turns along the line, a dash each in its own colour, and the legend says which equals which. None, NaN and
infinite values are skipped (a gap, or "n/a" for a bar), never a crash.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import groupby
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from gradcam_cli.outputs.text import fitted, font, one_line

SCALE = 3  # shapes are drawn this many times larger, then shrunk: anti-aliasing without a plotting library
BACKGROUND, INK, MUTED = (255, 255, 255), (33, 33, 33), (96, 96, 96)  # muted: ticks, notes, baselines' names
GRID, AXIS, PANEL, STAR, WHISKER = (232, 232, 232), (140, 140, 140), (248, 248, 248), (232, 163, 0), (50, 50, 50)
# Tableau 10 less its grey (greys are the baselines'), then darker hues that stay apart from those nine
PALETTE = ((31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189), (140, 86, 75), (227, 119, 194), (188, 189, 34),
           (23, 190, 207), (57, 59, 121), (99, 121, 57), (140, 109, 49), (132, 60, 57), (123, 65, 115), (177, 89, 40))  # fmt: skip
GREYS = ((120, 120, 120), (160, 160, 160), (80, 80, 80), (185, 185, 185))
DASHES = ((4.0, 2.5), (1.0, 1.6), (5.0, 1.8, 1.2, 1.8), (2.0, 2.0))  # on, off, ... in line widths: one pattern per baseline
LINE, BASELINE_LINE, MARKER = 2.4, 1.8, 2.8  # output pixels
MARKERS_UP_TO = 12  # points per series; denser curves read better as plain lines
NAME_CHARS = 20  # legend and bar labels keep room for this many average characters, then shorten with '…'
TIE_DASH = 2.5  # line widths: each of the tied curves' turn along their common line
RGB = tuple[int, int, int]
Style = tuple[RGB, tuple[float, ...] | None]  # a colour and a dash pattern (None: solid)
Data = tuple[list[float], list[float], list[float] | None, list[float] | None]  # xs, ys, low, high


@dataclass(frozen=True)
class Series:
    """One line: ys at xs, or at the chart's categories (xs None, or category indices), an optional band from low to high."""

    name: str
    ys: Sequence[float]
    xs: Sequence[float] | None = None
    low: Sequence[float] | None = None
    high: Sequence[float] | None = None
    baseline: bool = False


@dataclass(frozen=True)
class PlotArea:
    """Where a chart's data lies, in output pixels: what the drawing goes by and what tests measure."""

    left: float
    top: float
    right: float
    bottom: float
    x_range: tuple[float, float]
    y_range: tuple[float, float]
    x_ticks: tuple[float, ...]
    y_ticks: tuple[float, ...]
    text: int  # the labels' text size
    tied: tuple[int, ...] = ()  # per series, the earlier series its curve lies on (its own index: none)

    def point(self, x: float, y: float) -> tuple[float, float]:
        """The pixel (column, row) of a data point."""
        (x0, x1), (y0, y1) = self.x_range, self.y_range
        return self.left + (x - x0) / (x1 - x0) * (self.right - self.left), self.bottom - (y - y0) / (y1 - y0) * (self.bottom - self.top)


def styles(keys: Iterable[tuple[str, bool]]) -> dict[tuple[str, bool], Style]:
    """A style per (name, baseline) in order of first appearance: the same order gives the same colours in any chart."""
    found: dict[tuple[str, bool], Style] = {}
    for key in keys:
        if key not in found:
            index = sum(1 for _, baseline in found if baseline == key[1])
            found[key] = (GREYS[index % len(GREYS)], DASHES[index % len(DASHES)]) if key[1] else (PALETTE[index % len(PALETTE)], None)
    return found


def nice_ticks(low: float, high: float, count: int = 5, cover: bool = True) -> tuple[float, ...]:
    """Round ticks (steps of 1, 2, 2.5 or 5 times a power of ten), reaching past [low, high] when cover, else within it."""
    if not high > low:
        low, high = low - max(abs(low) * 0.1, 0.5), high + max(abs(high) * 0.1, 0.5)
    raw = (high - low) / max(1, count)
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw * (1 - 1e-9))
    start, end, slack = (math.floor, math.ceil, 1e-9) if cover else (math.ceil, math.floor, -1e-9)  # 0.3 / 0.1 is 2.9999999999999996
    first, last = start(low / step + slack) * step, end(high / step - slack) * step
    return tuple(round(first + i * step, 10) for i in range(round((last - first) / step) + 1))


def tick_label(value: float, ticks: Sequence[float]) -> str:
    """A tick's text with as many decimals as the step needs, so 0.25 and 0.5 read as 0.25 and 0.50."""
    step = abs(ticks[1] - ticks[0]) if len(ticks) > 1 else 1.0
    decimals = next((d for d in range(7) if abs(step * 10**d - round(step * 10**d)) < 1e-6), 6)
    return f"{value + 0.0:.{decimals}f}"  # + 0.0: -0.0 reads 0


def numbers(values: Sequence[Any], owner: str, what: str) -> list[float]:
    """Floats with None, NaN and ±inf all NaN (a gap to draw); text that is no number is the caller's error."""
    try:
        numbers = [math.nan if value is None else float(value) for value in values]
    except (TypeError, ValueError):
        raise ValueError(f"{owner}: {what} must be numbers, not {list(values)!r}") from None
    return [number if math.isfinite(number) else math.nan for number in numbers]


def text_length(text: str, size: int) -> float:
    """A line's width in output pixels as drawn: measured at SCALE times the size, where the glyphs are drawn."""
    return float(font(size * SCALE).getlength(one_line(text))) / SCALE


def _prepare(series: Sequence[Series], categories: Sequence[str] | None) -> list[Data]:
    """Each series as lists of equal length; categorical xs are the categories' indices."""
    if not series:
        raise ValueError("a line chart needs at least one series")
    if categories is not None and not categories:
        raise ValueError("categories is empty: pass at least one, or None for a numeric x axis")
    prepared = []
    for s in series:
        owner = f"series {s.name!r}"
        ys = numbers(s.ys, owner, "ys")
        if s.xs is None and (categories is None or len(ys) > len(categories)):
            raise ValueError(f"{owner} has no xs and {len(ys)} values for {len(categories or ())} categories: pass xs or categories")
        xs = [float(i) for i in range(len(ys))] if s.xs is None else numbers(s.xs, owner, "xs")
        low, high = (None if v is None else numbers(v, owner, "low or high") for v in (s.low, s.high))
        for what, values in (("xs", xs), ("low", low), ("high", high)):
            if values is not None and len(values) != len(ys):
                raise ValueError(f"{owner}: {what} has {len(values)} values for {len(ys)} ys")
        prepared.append((xs, ys, low, high))
    return prepared


def plot_area(series: Sequence[Series], *, title: str, x_label: str, y_label: str, y_range: tuple[float, float] | None = None,
              categories: Sequence[str] | None = None, size: tuple[int, int] = (960, 600)) -> PlotArea:  # fmt: skip
    """The geometry line_chart draws these arguments with: a slot per category or round ticks past the data, the legend right."""
    (width, height), prepared = size, _prepare(series, categories)
    text = max(11, round(min(width, height * 1.6) / 64))
    top, bottom = text * (3.0 + 1.8 * bool(title)), height - text * 4.6
    count = max(4, round((bottom - top) / 70))
    if y_range is not None and not (math.isfinite(y_range[0]) and math.isfinite(y_range[1]) and y_range[1] > y_range[0]):
        raise ValueError(f"y_range must be two finite numbers, low < high, not {y_range!r}")
    ys = [v for _, values, low, high in prepared for column in (values, low or [], high or []) for v in column if math.isfinite(v)]
    y_ticks = nice_ticks(*y_range, count=count, cover=False) if y_range else nice_ticks(min(ys, default=0.0), max(ys, default=1.0), count)
    y_span = (float(y_range[0]), float(y_range[1])) if y_range else (y_ticks[0], y_ticks[-1])
    tied = _ties(series, prepared, (bottom - top) / (y_span[1] - y_span[0]))
    labels = [_label(series, tied, i) for i in range(len(series))]
    legend = text * 2.6 + min(max(text_length(label, text) for label in labels), NAME_CHARS * text_length("n", text))
    right = width - text * 2.4 - legend
    if categories is not None:
        x_range, x_ticks = (-0.5, len(categories) - 0.5), tuple(float(i) for i in range(len(categories)))
    else:
        xs = [x for data in prepared for x in data[0] if math.isfinite(x)]
        x_ticks = nice_ticks(min(xs, default=0.0), max(xs, default=1.0), count=max(2, round((right - 4 * text) / 110)))
        x_range = (x_ticks[0], x_ticks[-1])
    left = text * 3.5 + max(text_length(tick_label(v, y_ticks), text) for v in y_ticks)
    if right - left < 4 * text or bottom - top < 4 * text:
        raise ValueError(f"a chart of {width}x{height} pixels leaves no room for the data; make it larger")
    return PlotArea(left, top, right, bottom, x_range, y_span, x_ticks, y_ticks, text, tied)


def _ties(series: Sequence[Series], prepared: list[Data], pixels_per_unit: float) -> tuple[int, ...]:
    """Per series, the first earlier method whose curve its own would cover (the same xs and gaps, every point within a
    line's width of it, so no pixel of the other would show); its own index when none. Baselines are dashed apart."""
    tied = list(range(len(series)))
    for i, (xs, ys, _, _) in enumerate(prepared):
        for j in range(i):
            other_xs, other_ys = prepared[j][0], prepared[j][1]
            if series[i].baseline or series[j].baseline or tied[j] != j or len(other_ys) != len(ys):
                continue
            if all(_same(a, b) for a, b in zip(xs, other_xs)) and all(
                _same(a, b, LINE / pixels_per_unit) for a, b in zip(ys, other_ys)
            ):  # fmt: skip
                tied[i] = j
                break
    return tuple(tied)


def _same(a: float, b: float, within: float = 1e-9) -> bool:
    """Both gaps, or both numbers within `within` of each other."""
    return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= within


def _label(series: Sequence[Series], tied: Sequence[int], index: int) -> str:
    """The legend's name of a series: `xgradcam = gradcam` for one lying on another's curve."""
    name = series[index].name
    return name if tied[index] == index else f"{name} = {series[tied[index]].name}"


def _turn(tied: Sequence[int], index: int) -> tuple[int, int]:
    """A series' place among the curves lying on one line (0: the first, drawn whole) and how many lie there."""
    group = [i for i, first in enumerate(tied) if first == tied[index]]
    return group.index(index), len(group)


class Pen:
    """Draws in output pixels on a canvas SCALE times larger: the drawing code reads in the picture's own measures."""

    def __init__(self, size: tuple[int, int]) -> None:
        self.size, self.canvas = size, Image.new("RGB", (size[0] * SCALE, size[1] * SCALE), BACKGROUND)
        self.draw = ImageDraw.Draw(self.canvas, "RGBA")

    def __call__(self, shape: str, points: Sequence[tuple[float, float]], width: float = 0.0, **style: Any) -> None:
        """Any ImageDraw shape ("rectangle", "polygon", "ellipse", "line") by its points."""
        getattr(self.draw, shape)([(x * SCALE, y * SCALE) for x, y in points], width=round(width * SCALE), **style)

    def line(self, points: Sequence[tuple[float, float]], fill: Any, width: float = 1.0) -> None:
        self("line", points, width, fill=fill, joint="curve")

    def marker(self, x: float, y: float, colour: RGB, radius: float = MARKER) -> None:
        self("ellipse", [(x - radius, y - radius), (x + radius, y + radius)], 1, fill=colour, outline=BACKGROUND)

    def text(self, xy: tuple[float, float], text: str, size: int, fill: RGB = INK, anchor: str = "la", width: float | None = None) -> None:
        """One line of text, cut with '…' to the width when one is given."""
        shown = one_line(text) if width is None else fitted(one_line(text), font(size * SCALE), max(0, round(width * SCALE)))
        self.draw.text((xy[0] * SCALE, xy[1] * SCALE), shown, font=font(size * SCALE), fill=fill, anchor=anchor)

    def dashed(self, points: Sequence[tuple[float, float]], pattern: tuple[float, ...], fill: RGB, width: float, phase: float = 0) -> None:
        """A polyline cut into dashes (pattern in line widths, begun `phase` line widths into it) whose rhythm runs on
        across corners, as a plotting library's does."""
        index, left, skip = 0, pattern[0] * width, phase * width
        while skip > 1e-9:
            step = min(left, skip)
            left, skip = left - step, skip - step
            if left <= 1e-9:
                index = (index + 1) % len(pattern)
                left = pattern[index] * width
        for (x0, y0), (x1, y1) in zip(points, points[1:]):
            length, done = math.hypot(x1 - x0, y1 - y0), 0.0
            while done < length:
                step = min(left, length - done)
                if index % 2 == 0:
                    a, b = done / length, (done + step) / length
                    self.line([(x0 + (x1 - x0) * a, y0 + (y1 - y0) * a), (x0 + (x1 - x0) * b, y0 + (y1 - y0) * b)], fill, width)
                done, left = done + step, left - step
                if left <= 1e-9:
                    index = (index + 1) % len(pattern)
                    left = pattern[index] * width

    def hatched(self, box: Sequence[float], colour: RGB) -> None:
        """A pale tint of the colour under diagonal strokes of it: a baseline's bar, told apart even in grey print."""
        x0, y0, x1, y1 = (round(v * SCALE) for v in box)
        tile = Image.new("RGB", (max(1, x1 - x0), max(1, y1 - y0)), tuple(round(c + (255 - c) * 0.6) for c in colour))
        for k in range(-tile.height, tile.width, 6 * SCALE):
            ImageDraw.Draw(tile).line([(k, tile.height), (k + tile.height, 0)], fill=colour, width=round(1.3 * SCALE))
        ImageDraw.Draw(tile).rectangle([0, 0, tile.width - 1, tile.height - 1], outline=colour, width=SCALE)
        self.canvas.paste(tile, (x0, y0))


def line_chart(series: Sequence[Series], *, title: str, x_label: str, y_label: str, y_range: tuple[float, float] | None = None,
               categories: Sequence[str] | None = None, size: tuple[int, int] = (960, 600)) -> np.ndarray:  # fmt: skip
    """Curves, one per series, with bands, baselines dashed beneath the methods and a legend right of the plot: (H, W, 3) uint8."""
    area = plot_area(series, title=title, x_label=x_label, y_label=y_label, y_range=y_range, categories=categories, size=size)
    prepared, found, pen = _prepare(series, categories), styles((s.name, s.baseline) for s in series), Pen(size)
    grid_lines(pen, area)
    order = sorted(range(len(series)), key=lambda i: not series[i].baseline)  # baselines first: the methods lie on top
    for i in order:
        _band(pen, area, prepared[i], found[series[i].name, series[i].baseline][0], 0.10 if series[i].baseline else 0.17)
    for i in order:
        _curve(pen, area, prepared[i], found[series[i].name, series[i].baseline], series[i].baseline, _turn(area.tied, i))
    _frame(pen, area, categories)
    _legend(pen, area, series, prepared, found)
    text = area.text
    pen.text((area.left, text * 1.2), title, round(text * 1.3), width=size[0] - area.left - text)
    pen.text(((area.left + area.right) / 2, area.bottom + text * 2.3), x_label, text, INK, "ma", area.right - area.left)
    _upright(pen, y_label, text, (text * 1.65, (area.top + area.bottom) / 2), area.bottom - area.top)
    return np.asarray(pen.canvas.reduce(SCALE))  # each SCALE x SCALE block averaged: the anti-aliasing


def grid_lines(pen: Pen, area: PlotArea) -> None:
    for y in area.y_ticks:
        pen.line([(area.left, area.point(0.0, y)[1]), (area.right, area.point(0.0, y)[1])], GRID)
    for x in area.x_ticks:
        pen.line([(area.point(x, 0.0)[0], area.top), (area.point(x, 0.0)[0], area.bottom)], GRID)


def _runs(xs: Sequence[float], *columns: Sequence[float]) -> list[list[int]]:
    """Indices of consecutive points where x and every column are finite: each run is drawn unbroken, gaps between."""
    finite = [math.isfinite(x) and all(math.isfinite(c[i]) for c in columns) for i, x in enumerate(xs)]
    return [[i for i, _ in run] for ok, run in groupby(enumerate(finite), key=lambda pair: pair[1]) if ok]


def _band(pen: Pen, area: PlotArea, data: Data, colour: RGB, alpha: float) -> None:
    xs, _, low, high = data
    if low is None or high is None:
        return
    for run in _runs(xs, low, high):
        upper, lower = [area.point(xs[i], high[i]) for i in run], [area.point(xs[i], low[i]) for i in reversed(run)]
        if len(run) == 1:  # one point's band: a bar as wide as its marker
            pen.line([upper[0], lower[0]], (*colour, round(alpha * 255)), MARKER * 2)
        else:
            pen("polygon", upper + lower, fill=(*colour, round(alpha * 255)))


def _curve(pen: Pen, area: PlotArea, data: Data, style: Style, baseline: bool, turn: tuple[int, int] = (0, 1)) -> None:
    """A series' line, broken at missing values; markers on sparse methods' points and on any point a gap leaves alone.
    The k-th of n curves on one line is drawn in its turns (one dash in n) and its markers smaller inside the others'."""
    (xs, ys, _, _), (colour, dash) = data, style
    (k, n), radius = turn, MARKER * (turn[1] - turn[0]) / turn[1]
    for run in _runs(xs, ys):
        points = [area.point(xs[i], ys[i]) for i in run]
        if len(points) > 1 and k:
            pen.dashed(points, (TIE_DASH, TIE_DASH * (n - 1)), colour, LINE, phase=TIE_DASH * (n - k))
        elif len(points) > 1 and dash is None:
            pen.line(points, colour, LINE)
        elif len(points) > 1 and dash is not None:
            pen.dashed(points, dash, colour, BASELINE_LINE)
        for x, y in points if len(points) == 1 or (not baseline and len(ys) <= MARKERS_UP_TO) else ():
            pen.marker(x, y, colour, radius)


def _frame(pen: Pen, area: PlotArea, categories: Sequence[str] | None) -> None:
    """White over all but the plot area and a marker's reach, so data past the axes is cut; then the axes, ticks and their labels."""
    pad, far, text = MARKER + 1, sum(pen.size), area.text
    left, top, right, bottom = area.left - pad, area.top - pad, area.right + pad, area.bottom + pad
    pen("rectangle", [(left - far, top - far), (right + far, bottom + far)], far, outline=BACKGROUND)  # a frame as wide as the picture
    pen.line([(area.left, area.top), (area.left, area.bottom), (area.right, area.bottom)], AXIS)
    for y in area.y_ticks:
        row = area.point(0.0, y)[1]
        pen.line([(area.left - text * 0.35, row), (area.left, row)], AXIS)
        pen.text((area.left - text * 0.6, row), tick_label(y, area.y_ticks), text, MUTED, "rm")
    for i, x in enumerate(area.x_ticks):
        column = area.point(x, 0.0)[0]
        pen.line([(column, area.bottom), (column, area.bottom + text * 0.35)], AXIS)
        label = categories[i] if categories is not None else tick_label(x, area.x_ticks)
        pen.text((column, area.bottom + text * 0.5), label, text, MUTED, "ma", (area.right - area.left) / len(area.x_ticks) - text * 0.4)


def _legend(pen: Pen, area: PlotArea, series: Sequence[Series], prepared: list[Data], found: dict[tuple[str, bool], Style]) -> None:
    """An entry per series right of the plot, never over the data: its line as drawn, over a patch of its band if it has one."""
    text, x0, x1 = area.text, area.right + area.text * 1.2, area.right + area.text * 3.4
    step = min(text * 1.7, (area.bottom - area.top) / len(series))  # closer together when many must fit
    for i, (s, (_, ys, low, high)) in enumerate(zip(series, prepared)):
        row, (colour, dash) = area.top + step * (i + 0.5), found[s.name, s.baseline]
        if low is not None and high is not None:
            pen("rectangle", [(x0, row - text * 0.45), (x1, row + text * 0.45)], fill=(*colour, 45))
        first = area.tied[i] if area.tied else i
        (k, n), line = _turn(area.tied or range(len(series)), i), [(x0, row), (x1, row)]
        if k:  # as in the plot: its turns over the line of the curve it lies on
            pen.line(line, found[series[first].name, series[first].baseline][0], LINE)
            pen.dashed(line, (TIE_DASH, TIE_DASH * (n - 1)), colour, LINE, phase=TIE_DASH * (n - k))
        elif dash is None:
            pen.line(line, colour, LINE)
        else:
            pen.dashed(line, dash, colour, BASELINE_LINE)
        if dash is None and len(ys) <= MARKERS_UP_TO:  # a marker where the curve has them
            pen.marker((x0 + x1) / 2, row, colour)
        label = _label(series, area.tied or range(len(series)), i)
        pen.text((x1 + text * 0.4, row), label, text, MUTED if s.baseline else INK, "lm", pen.size[0] - x1 - text * 1.6)


def _upright(pen: Pen, text: str, size: int, centre: tuple[float, float], width: float) -> None:
    """Text turned a quarter left, reading upwards (the y axis' label): drawn on its own mask, rotated, stamped in ink."""
    face = font(size * SCALE)
    shown = fitted(one_line(text), face, round(width * SCALE))
    mask = Image.new("L", (math.ceil(face.getlength(shown)) + 2, sum(face.getmetrics()) + 2), 0)
    ImageDraw.Draw(mask).text((1, 1), shown, font=face, fill=255)
    mask = mask.rotate(90, expand=True)
    x, y = round(centre[0] * SCALE - mask.width / 2), round(centre[1] * SCALE - mask.height / 2)
    pen.canvas.paste(INK, (x, y, x + mask.width, y + mask.height), mask)
