"""The summary chart of `gradcam eval`: a panel per metric, a bar per map set with its interval, the best starred.

Drawn with the charts' kit (outputs/charts.py): the same supersampled pen,
palette and ticks, so a method has the same colour here as in the curves;
baselines' bars are hatched in grey.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gradcam_cli.outputs.charts import (
    AXIS, INK, MUTED, NAME_CHARS, PANEL, RGB, SCALE, STAR, WHISKER, Pen, PlotArea, grid_lines, nice_ticks, numbers, styles,
    text_length, tick_label,
)  # fmt: skip


@dataclass(frozen=True)
class Bar:
    """One method's value in a summary panel; a whisker from low to high when both are given."""

    name: str
    value: float | None
    low: float | None = None
    high: float | None = None
    baseline: bool = False
    best: bool = False


@dataclass(frozen=True)
class Panel:
    """One metric: its title, which way is better, and a bar per method."""

    title: str
    note: str
    bars: Sequence[Bar]


def summary_chart(panels: Sequence[Panel], *, title: str, columns: int = 3, panel_size: tuple[int, int] = (420, 300)) -> np.ndarray:
    """Small multiples, a panel per metric with a bar per method: columns x panel width wide, a title band over the rows."""
    if not panels or any(not panel.bars for panel in panels):
        raise ValueError("a summary chart needs at least one panel, and every panel at least one bar")
    columns, (width, height) = max(1, min(columns, len(panels))), panel_size
    text = max(11, round(min(width, height * 1.4) / 30))
    head = round(text * 2.6)
    found = styles((bar.name, bar.baseline) for panel in panels for bar in panel.bars)
    pen = Pen((columns * width, head + math.ceil(len(panels) / columns) * height))
    pen.text((text, head / 2), title, round(text * 1.35), anchor="lm", width=pen.size[0] - 2 * text)
    for i, panel in enumerate(panels):
        box = ((i % columns) * width, head + (i // columns) * height, width, height)
        area, values, texts = _panel(pen, panel, box, text)
        for j, bar in enumerate(panel.bars):
            _bar(pen, area, j, bar, values[j], texts[j], found[bar.name, bar.baseline][0], box)
    return np.asarray(pen.canvas.reduce(SCALE))  # each SCALE x SCALE block averaged: the anti-aliasing


def _panel(pen: Pen, panel: Panel, box: tuple[int, int, int, int], text: int) -> tuple[PlotArea, list[list[float]], list[str]]:
    """A panel's frame, title, note and value axis; its bars as a plot: x the values (0 always in range), y the bar's index."""
    x, y, width, height = box
    values = [numbers([bar.value, bar.low, bar.high], f"bar {bar.name!r}", "value, low and high") for bar in panel.bars]
    largest = max((abs(v[0]) for v in values if math.isfinite(v[0]) and v[0]), default=1.0)
    decimals = min(6, max(0, 2 - math.floor(math.log10(largest))))  # the panel's one format: 3 digits for its largest value
    texts = [f"{v[0]:.{decimals}f}" if math.isfinite(v[0]) else "" for v in values]
    labels = min(max(text_length(bar.name, text) for bar in panel.bars), NAME_CHARS * text_length("n", text) * 0.75)
    left, right = x + text * 2.7 + labels, x + width - text * 1.4 - max(text_length(shown, text) for shown in texts)
    top, bottom = y + text * 4.3, y + height - text * 2.1
    if right - left < 3 * text or bottom - top < len(panel.bars) * 8:
        raise ValueError(f"panel {panel.title!r}: {len(panel.bars)} bars do not fit in {width}x{height} pixels; make panel_size larger")
    finite = [v for row in values for v in row if math.isfinite(v)]
    low, high = min([0.0, *finite]), max([0.0, *finite])
    ticks = nice_ticks(low, high if high > low else 1.0, count=max(2, round((right - left) / (4.5 * text))))  # all n/a or 0: 0 to 1
    area = PlotArea(left, top, right, bottom, (ticks[0], ticks[-1]), (len(panel.bars) - 0.5, -0.5), ticks, (), text)
    pen("rectangle", [(x + 3, y + 3), (x + width - 3, y + height - 3)], fill=PANEL)
    pen.text((x + text * 0.8, y + text * 0.8), panel.title, round(text * 1.15), width=width - 2 * text)
    pen.text((x + text * 0.8, y + text * 2.4), panel.note, round(text * 0.9), MUTED, width=width - 2 * text)
    grid_lines(pen, area)
    for tick in ticks:
        pen.text((area.point(tick, 0.0)[0], bottom + text * 0.4), tick_label(tick, ticks), round(text * 0.9), MUTED, "ma")
    pen.line([(area.point(0.0, 0.0)[0], top), (area.point(0.0, 0.0)[0], bottom)], AXIS)
    return area, values, texts


def _bar(pen: Pen, area: PlotArea, index: int, bar: Bar, values: list[float], shown: str, colour: RGB, box: tuple[int, ...]) -> None:
    """One bar with its name, value (or "n/a" in its place), whisker, and for the best the star and a bold outline."""
    (value, low, high), row, text, zero = values, area.point(0.0, index)[1], area.text, area.point(0.0, 0.0)[0]
    pitch = (area.bottom - area.top) / (area.y_range[0] - area.y_range[1])
    half, size, ink = min(pitch * 0.33, text * 0.75), max(9, min(text, round(pitch * 0.72))), MUTED if bar.baseline else INK
    pen.text((box[0] + text * 2.1, row), bar.name, size, ink, "lm", area.left - box[0] - text * 2.7)
    if bar.best:  # a drawn star: the bundled font has no ★
        corners = [(k * math.pi / 5 - math.pi / 2, text * (0.55 if k % 2 == 0 else 0.23)) for k in range(10)]
        pen("polygon", [(box[0] + text * 1.25 + r * math.cos(a), row + r * math.sin(a)) for a, r in corners], fill=STAR)
    if not math.isfinite(value):
        side = 1 if zero < (area.left + area.right) / 2 else -1  # where the bar would start, away from the panel's edge
        pen.text((zero + side * 0.4 * text, row), "n/a", size, MUTED, "lm" if side > 0 else "rm")
        return
    pen.text((box[0] + box[2] - text * 0.8, row), shown, size, ink, "rm")
    end = area.point(value, 0.0)[0]
    rect = [(min(zero, end), row - half), (max(zero, end), row + half)]
    if bar.baseline:
        pen.hatched([*rect[0], *rect[1]], colour)
    else:
        pen("rectangle", rect, fill=colour)
    if bar.best:
        pen("rectangle", [(rect[0][0] - 1, rect[0][1] - 1), (rect[1][0] + 1, rect[1][1] + 1)], 2, outline=INK)
    if math.isfinite(low) and math.isfinite(high):
        a, b, cap = area.point(low, 0.0)[0], area.point(high, 0.0)[0], half * 0.5
        for line in ([(a, row), (b, row)], [(a, row - cap), (a, row + cap)], [(b, row - cap), (b, row + cap)]):
            pen.line(line, WHISKER, 1.4)
