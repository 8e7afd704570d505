"""The table `gradcam eval` prints: a row per method and baseline, a column per metric, mean and 95% interval.

A cell is starred when its map set is the column's best or cannot be told
apart from the best, and a method's cell is marked ✗ when a baseline does
better; both need a difference beyond chance on these images (evaluate/
summary.py), so a column where every map set scores the same has neither.
Lines under the table say which methods a baseline beats, which columns tell
no map set apart, and which methods survive the sanity check's randomisation.
The table fits the terminal and no cell is ever cut: no column wraps its
cells, so when the table is too wide its headers are wrapped to their
columns' numbers, and if it still is, it is split into tables of the columns
that fit, each with the map names.
"""

from __future__ import annotations

import io
import textwrap
from typing import TYPE_CHECKING, Any

from gradcam_cli.evaluate.measures import BY_NAME, MEASURES

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

NO_WIDTH = 10_000  # columns of a console that is "as wide as the table needs"


def _cell(stats: dict[str, Any], best: bool, beats: bool | None) -> str:
    mean = stats.get("mean")
    if mean is None:
        return "n/a"
    marks = (" ★" if best else "") + (" ✗" if beats is False else "")
    low, high = stats.get("low"), stats.get("high")
    interval = f"\n{low:.3f}–{high:.3f}" if low is not None and high is not None and low != high else ""
    return f"{mean:.3f}{marks}{interval}"


def headline_columns(summary: dict[str, Any]) -> list[str]:
    """The measures of the summary that head a metric's column, in the table's order."""
    return [m.name for m in MEASURES if m.headline and m.name in summary["measures"]]


def eval_table(summary: dict[str, Any], width: int | None = None, color: bool = False) -> str:
    """The table and its notes as text (rich's box drawing); `width` 0: the terminal's, None: as wide as it needs."""
    from rich.console import Console

    columns = headline_columns(summary)
    out = io.StringIO()
    console = Console(file=out, width=width or None, force_terminal=color, no_color=not color, soft_wrap=False, highlight=False)
    if width is None:
        console.width = NO_WIDTH
    units = f", {summary['detections']} detections" if summary.get("detections") is not None else ""
    title = f"{summary['model']}: {summary['images']} images{units}" + (" (stopped early)" if summary.get("interrupted") else "")
    narrow = len(_fitting(summary, columns, console, narrow=False)) > 1  # headers wrapped only when the table does not fit
    for index, group in enumerate(_fitting(summary, columns, console, narrow)):
        console.print(_table(summary, group, title if index == 0 else None, narrow))
    for line in notes(summary, columns):
        console.print(line, markup=False, width=min(console.width, 120))
    return out.getvalue()


def _table(summary: dict[str, Any], columns: list[str], title: str | None, narrow: bool) -> Table:
    """The table of these columns; no column wraps, so each is as wide as its longest line and nothing is cut."""
    from rich.table import Table

    table = Table(title=title, title_justify="left", show_lines=True)
    table.add_column("map", no_wrap=True)
    rows = {name: _cells(summary, name, columns) for name in summary["results"]}
    for index, name in enumerate(columns):
        widest = max(len(line) for cells in rows.values() for line in cells[index].splitlines())
        table.add_column(_header(name, widest if narrow else None), justify="right", no_wrap=True)
    for name, cells in rows.items():
        table.add_row(f"{name} (baseline)" if summary["results"][name]["baseline"] else name, *cells)
    return table


def _cells(summary: dict[str, Any], name: str, columns: list[str]) -> list[str]:
    beats = summary["beats_baselines"].get(name) or {}
    return [_cell(summary["results"][name][c], name in summary["best"].get(c, []), beats.get(c)) for c in columns]


def _header(name: str, width: int | None) -> str:
    """The measure's name over which way is better; with a width, each wrapped to it (words kept whole)."""
    measure = BY_NAME[name]
    lines = [measure.label, f"{'↑' if measure.higher_is_better else '↓'} {measure.note}"]
    if width is not None:
        lines = [part for line in lines for part in textwrap.wrap(line, width, break_long_words=False)]
    return "\n".join(lines)


def _fitting(summary: dict[str, Any], columns: list[str], console: Console, narrow: bool) -> list[list[str]]:
    """The columns in groups, in order, each group's table no wider than the console; a column too wide even alone
    gets a table of its own (and a terminal's own wrapping)."""
    from rich.measure import Measurement

    unbounded = console.options.update_width(NO_WIDTH)  # measured at any width: a width is not cut to the console's
    groups: list[list[str]] = [[]]
    for name in columns:
        tried = [*groups[-1], name]
        if groups[-1] and Measurement.get(console, unbounded, _table(summary, tried, None, narrow)).maximum > console.width:
            groups.append([name])
        else:
            groups[-1] = tried
    return groups


def notes(summary: dict[str, Any], columns: list[str]) -> list[str]:
    """What the marks mean, who a baseline beats, where nothing is told apart, who survives randomisation."""
    unit = "detection by detection" if summary.get("detections") is not None else "image by image"
    lines = [
        f"★ best of the column, or not told apart from it · ✗ a baseline does better · told apart: {unit}, "
        "beyond chance (sign-flip test, 5%) · under each mean its 95% interval (bootstrap)"
    ]
    for name, verdicts in summary["beats_baselines"].items():
        lost = [BY_NAME[c].label for c in columns if verdicts.get(c) is False]
        if lost:
            lines.append(f"{name}: a baseline does better on {', '.join(lost)}")
    alike = [BY_NAME[c].label for c in columns if not summary["best"].get(c) and _has_means(summary, c)]
    if alike:
        lines.append(f"no map set told apart from the others on {', '.join(alike)} (more images may tell)")
    for name, about in (summary.get("sanity") or {}).items():
        last = about["spearman"][-1] if about.get("spearman") else None
        if about.get("survives") and last is not None:
            lines.append(
                f"{name}: its maps survive randomising the whole network (rank correlation {last:.2f} with the trained model's): "
                "they show the image more than the model"
            )
    if summary.get("failed_images"):
        lines.append(f"{summary['failed_images']} image(s) could not be evaluated (see the messages above)")
    return lines


def _has_means(summary: dict[str, Any], column: str) -> bool:
    """More than one map set has a mean in the column: there was something to tell apart."""
    return sum(result[column].get("mean") is not None for result in summary["results"].values()) > 1
