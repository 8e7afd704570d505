"""The table `gradcam eval` prints: a row per method and baseline, a column per metric, mean and 95% interval.

The best mean of each column is starred; a method's cell that is not better
than every baseline is marked ✗, so "does not beat a random map on my data"
is seen, not inferred. Lines under the table say which methods failed to
beat the baselines and which survived the sanity check's randomisation.
"""

from __future__ import annotations

import io
from typing import Any

from gradcam_cli.evaluate.measures import BY_NAME, MEASURES


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
    from rich.table import Table

    columns = headline_columns(summary)
    title = f"{summary['model']}: {summary['images']} images" + (" (stopped early)" if summary.get("interrupted") else "")
    table = Table(title=title, title_justify="left", show_lines=True)
    table.add_column("map")
    for name in columns:
        measure = BY_NAME[name]
        table.add_column(f"{measure.label}\n{'↑' if measure.higher_is_better else '↓'} {measure.note}", justify="right")
    for name, result in summary["results"].items():
        beats = summary["beats_baselines"].get(name) or {}
        label = f"{name} (baseline)" if result["baseline"] else name
        table.add_row(label, *(_cell(result[c], name in summary["best"].get(c, []), beats.get(c)) for c in columns))
    out = io.StringIO()
    console = Console(file=out, width=width or None, force_terminal=color, no_color=not color, soft_wrap=False, highlight=False)
    if width is None:
        console.width = 60 + 20 * len(columns)
    console.print(table)
    for line in notes(summary, columns):
        console.print(line, markup=False)
    return out.getvalue()


def notes(summary: dict[str, Any], columns: list[str]) -> list[str]:
    """What the marks mean, who does not beat the baselines, who survives randomisation."""
    lines = ["★ best of the column · ✗ not better than every baseline (random, centre, edges) · intervals: 95%, bootstrap"]
    for name, verdicts in summary["beats_baselines"].items():
        lost = [BY_NAME[c].label for c in columns if verdicts.get(c) is False]
        if lost:
            lines.append(f"{name} does not beat the baselines on: {', '.join(lost)}")
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
