"""What `gradcam eval` leaves beside its records: eval.json, eval.csv and the charts, from the summary alone.

The summary is evaluate/summary.py's dict (eval.json as written), so the
files can be rebuilt from the records of a stopped run. Each file is written
atomically: a reader never sees half a table.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

from gradcam_cli.outputs.bar_chart import Bar, Panel, summary_chart
from gradcam_cli.outputs.charts import Series, line_chart
from gradcam_cli.outputs.files import write_atomic
from gradcam_cli.outputs.render import encode_png

SUMMARY_FILE, TABLE_FILE = "eval.json", "eval.csv"
CURVE_CHARTS = {"deletion": "eval_deletion.png", "insertion": "eval_insertion.png"}
SANITY_CHART, SUMMARY_CHART = "eval_sanity.png", "eval_summary.png"
CSV_COLUMNS = ("map", "baseline", "measure", "mean", "low", "high", "n", "higher_is_better", "best", "beats_baselines")


def write_eval_files(output_dir: Path, summary: dict[str, Any]) -> list[Path]:
    """eval.json, eval.csv and every chart the summary has data for; the paths written."""
    output_dir.mkdir(parents=True, exist_ok=True)
    written = [output_dir / SUMMARY_FILE, output_dir / TABLE_FILE]
    write_atomic(written[0], (json.dumps(summary, ensure_ascii=False, indent=2, allow_nan=False) + "\n").encode("utf-8"))
    write_atomic(written[1], csv_text(summary).encode("utf-8"))
    for curve, name in CURVE_CHARTS.items():
        chart = curve_chart(summary, curve)
        if chart is not None:
            written.append(output_dir / name)
            write_atomic(written[-1], encode_png(chart))
    charts = {SANITY_CHART: sanity_chart(summary), SUMMARY_CHART: overview_chart(summary)}
    for name, picture in charts.items():
        if picture is not None:
            written.append(output_dir / name)
            write_atomic(written[-1], encode_png(picture))
    return written


def csv_text(summary: dict[str, Any]) -> str:
    """eval.csv: `csv_rows` written as CSV."""
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(csv_rows(summary))
    return out.getvalue()


def csv_rows(summary: dict[str, Any]) -> list[list[Any]]:
    """The header, then one row per map set and measure: the mean, its interval, the count, and the verdicts."""
    rows: list[list[Any]] = [list(CSV_COLUMNS)]
    for name, result in summary["results"].items():
        for measure, about in summary["measures"].items():
            stats = result[measure]
            beats = (summary["beats_baselines"].get(name) or {}).get(measure)
            rows.append(
                [name, result["baseline"], measure, *(_cell(stats[k]) for k in ("mean", "low", "high", "n")), about["higher_is_better"],
                 name in summary["best"].get(measure, []), "" if beats is None else beats]
            )  # fmt: skip
    return rows


def _cell(value: Any) -> Any:
    return "" if value is None else value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def curve_chart(summary: dict[str, Any], curve: str) -> Any:
    """The mean deletion or insertion curve of every map set, with its 95% band; None without such curves."""
    series = [
        Series(name, curves[curve]["mean"], xs=summary["fractions"], low=curves[curve]["low"], high=curves[curve]["high"],
               baseline=summary["results"][name]["baseline"])
        for name, curves in summary["curves"].items() if curve in curves
    ]  # fmt: skip
    if not series:
        return None
    verb = "removed (most relevant first)" if curve == "deletion" else "restored (most relevant first)"
    return line_chart(
        series, title=f"{curve.capitalize()}: {summary['model']}", x_label=f"fraction of pixels {verb}",
        y_label=summary.get("score") or "class probability", y_range=(0.0, 1.0),
    )  # fmt: skip


def sanity_chart(summary: dict[str, Any]) -> Any:
    """Each method's rank correlation with the trained model's map after each step of the cascade."""
    sanity = summary.get("sanity") or {}
    if not sanity:
        return None
    steps = ["trained", *next(iter(sanity.values()))["steps"]]  # the trained model's map agrees with itself: 1
    series = [Series(name, [1.0, *about["spearman"]]) for name, about in sanity.items()]
    return line_chart(
        series, title=f"Sanity check: {summary['model']} randomised from the head down", x_label="randomised up to",
        y_label="rank correlation with the trained model's map", y_range=(-0.2, 1.0), categories=steps,
    )  # fmt: skip


def overview_chart(summary: dict[str, Any]) -> Any:
    """A panel per measure: every map set's mean and interval, the best marked, baselines apart."""
    panels = []
    for measure, about in summary["measures"].items():
        bars = [
            Bar(name, result[measure]["mean"], result[measure]["low"], result[measure]["high"], baseline=result["baseline"],
                best=name in summary["best"].get(measure, []))
            for name, result in summary["results"].items()
        ]  # fmt: skip
        if any(_is_number(bar.value) for bar in bars):
            panels.append(Panel(about["label"], "higher is better" if about["higher_is_better"] else "lower is better", bars))
    if not panels:
        return None
    units = f", {summary['detections']} detections" if summary.get("detections") is not None else ""
    return summary_chart(panels, title=f"gradcam eval: {summary['model']}, {summary['images']} images{units} (95% intervals)")
