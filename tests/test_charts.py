"""gradcam_cli/outputs/charts.py and bar_chart.py: curves and the summary as pixels, measured where the data says they are.

Each test reads the picture itself: a series' colour found at the pixel its
value maps to (plot_area gives the geometry), a dashed line's colour broken
along it, a band's tint, the best bar's star. The realistic example charts are
written to tests/artifacts/ (not tracked) for a person to look at.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import ROOT
from PIL import Image

from gradcam_cli.outputs.bar_chart import Bar, Panel, summary_chart
from gradcam_cli.outputs.charts import (
    GREYS,
    PALETTE,
    STAR,
    PlotArea,
    Series,
    line_chart,
    nice_ticks,
    plot_area,
    styles,
    tick_label,
)

SIZE = (640, 400)  # smaller than the default: the tests stay fast
XS = [i / 20 for i in range(21)]
LABELS = {"title": "t", "x_label": "fraction of pixels removed", "y_label": "class probability"}


def _near(picture: np.ndarray, colour: tuple[int, int, int], tolerance: int = 40) -> np.ndarray:
    """Where the picture has this colour, give or take the blending of an anti-aliased edge."""
    return np.abs(picture.astype(int) - np.array(colour)).max(axis=2) <= tolerance


def _chart(series: list[Series], **options: object) -> tuple[np.ndarray, PlotArea]:
    kwargs = {**LABELS, "y_range": (0.0, 1.0), "size": SIZE, **options}
    return line_chart(series, **kwargs), plot_area(series, **kwargs)  # type: ignore[arg-type]


def _rows_of(mask: np.ndarray, column: float) -> np.ndarray:
    return np.flatnonzero(mask[:, round(column)])


def test_sizes_and_dtype() -> None:
    picture = line_chart([Series("gradcam", [0.2, 0.4], [0.0, 1.0])], **LABELS)
    assert picture.shape == (600, 960, 3) and picture.dtype == np.uint8
    assert line_chart([Series("gradcam", [0.2, 0.4], [0.0, 1.0])], **LABELS, size=(480, 300)).shape == (300, 480, 3)
    panels = [Panel(f"metric {i}", "lower is better", [Bar("gradcam", 0.3), Bar("random", 0.5, baseline=True)]) for i in range(7)]
    summary = summary_chart(panels, title="summary")
    assert summary.dtype == np.uint8 and summary.shape[2] == 3
    assert summary.shape[1] == 3 * 420 and 3 * 300 < summary.shape[0] < 3 * 300 + 80  # three rows of three, a title band
    assert summary_chart(panels[:2], title="s", columns=3, panel_size=(300, 200)).shape[1] == 2 * 300  # no empty third column


def test_a_line_lands_where_its_values_say() -> None:
    """A line at 0.5 lies at the middle of the plot area; a sloped one at each x's own height."""
    flat, sloped = Series("gradcam", [0.5] * 21, XS), Series("gradcam++", XS, XS)
    picture, area = _chart([flat, sloped])
    assert area.point(0.5, 0.5)[1] == pytest.approx((area.top + area.bottom) / 2)
    for series, colour in ((flat, PALETTE[0]), (sloped, PALETTE[1])):
        for x in (0.13, 0.37, 0.63, 0.87):  # between the grid lines
            column, row = area.point(x, 0.5 if series is flat else x)
            rows = _rows_of(_near(picture, colour), column)
            assert rows.size and abs(rows.mean() + 0.5 - row) <= 1.5, (series.name, x, rows, row)


def test_the_band_is_drawn_under_its_line() -> None:
    plain = Series("gradcam", [0.5] * 21, XS)
    banded = Series("gradcam", [0.5] * 21, XS, low=[0.3] * 21, high=[0.7] * 21)
    (with_band, area), (without, _) = _chart([banded]), _chart([plain])
    column, row = (round(v) for v in area.point(0.5, 0.35))  # inside the band, off the line and the grid
    tinted, white = with_band[row, column].astype(int), without[row, column].astype(int)
    assert tuple(white) == (255, 255, 255)
    assert tinted.min() < 245 and tinted[2] > tinted[0] + 10  # a pale blue, the line's own colour
    outside_row = round(area.point(0.5, 0.15)[1])
    assert tuple(with_band[outside_row, column]) == (255, 255, 255)


def test_baselines_are_dashed_and_methods_solid() -> None:
    series = [Series("gradcam", [0.3] * 21, XS), Series("random", [0.6] * 21, XS, baseline=True)]
    picture, area = _chart(series)
    assert styles((s.name, s.baseline) for s in series)["random", True][0] == GREYS[0]
    columns = slice(round(area.left) + 6, round(area.right) - 6)

    def along(y: float, colour: tuple[int, int, int]) -> np.ndarray:
        row = area.point(0.0, y)[1]
        return _near(picture[math.floor(row) - 2 : math.ceil(row) + 2, columns], colour, 30).any(axis=0)

    solid, dashed = along(0.3, PALETTE[0]), along(0.6, GREYS[0])
    assert solid.all()
    gaps = np.count_nonzero(dashed[1:] & ~dashed[:-1])
    assert 0.3 < dashed.mean() < 0.8 and gaps >= 20  # interrupted all along, not once


def test_curves_that_coincide_take_turns_and_the_legend_says_so() -> None:
    """gradcam and xgradcam often have the same maps, so the same curves: drawn one on the other, xgradcam hid gradcam
    and gradcam's colour was nowhere to be found. Curves within a line's width of each other take turns along the line,
    each its own colour, markers nested; the legend draws the same and names them `xgradcam = gradcam`."""
    from gradcam_cli.outputs.charts import text_length

    ys = [0.9 - 0.03 * i for i in range(21)]
    near = [y + 0.002 for y in ys]  # under a pixel apart at this size: drawn on top of each other all the same
    series = [Series("gradcam", ys, XS), Series("xgradcam", near, XS), Series("layercam", [0.2] * 21, XS)]
    picture, area = _chart(series)
    assert area.tied == (0, 0, 2)

    def share(colour: tuple[int, int, int]) -> float:
        """Of the columns along the line, those where the colour is on it."""
        hits = []
        for column in range(round(area.left) + 6, round(area.right) - 6):
            x = area.x_range[0] + (column - area.left) / (area.right - area.left) * (area.x_range[1] - area.x_range[0])
            row = area.point(x, float(np.interp(x, XS, ys)))[1]
            hits.append(_near(picture[round(row) - 2 : round(row) + 3, column : column + 1], colour, 30).any())
        return float(np.mean(hits))

    assert share(PALETTE[0]) > 0.4 and share(PALETTE[1]) > 0.4, (share(PALETTE[0]), share(PALETTE[1]))
    text = area.text
    assert area.right == pytest.approx(SIZE[0] - text * 5.0 - text_length("xgradcam = gradcam", text)), "the legend's longest label"
    step = min(text * 1.7, (area.bottom - area.top) / 3)
    row, x0, x1 = round(area.top + step * 1.5), round(area.right + text * 1.2), round(area.right + text * 3.4)
    legend = picture[row - 2 : row + 3, x0:x1]
    assert _near(legend, PALETTE[0], 30).any(axis=0).mean() > 0.3 and _near(legend, PALETTE[1], 30).any(axis=0).mean() > 0.3
    apart = [Series("gradcam", ys, XS), Series("xgradcam", [y - 0.05 for y in ys], XS)]
    assert _chart(apart)[1].tied == (0, 1), "five hundredths apart is two lines"


def test_categorical_x() -> None:
    categories = ["head", "layer4", "layer3", "layer2", "layer1", "stem"]
    series = [Series("gradcam", [1.0, 0.8, 0.6, 0.4, 0.2, 0.0])]
    picture, area = _chart(series, categories=categories, y_range=(-1.0, 1.0))
    assert area.x_ticks == (0.0, 1.0, 2.0, 3.0, 4.0, 5.0) and area.x_range == (-0.5, 5.5)
    assert area.y_ticks[0] == -1.0 and area.y_ticks[-1] == 1.0 and 0.0 in area.y_ticks
    mask = _near(picture, PALETTE[0])
    for index, value in enumerate(series[0].ys):
        column, row = area.point(index, value)
        assert abs(_rows_of(mask, column).mean() + 0.5 - row) <= 2.0  # the marker at its category
    with pytest.raises(ValueError, match="categories"):
        line_chart([Series("gradcam", [0.1] * 7)], **LABELS, categories=categories)
    with pytest.raises(ValueError, match="no xs"):
        line_chart([Series("gradcam", [0.1, 0.2])], **LABELS)


def test_missing_values_leave_gaps_never_a_crash() -> None:
    def chart(missing: object) -> tuple[np.ndarray, PlotArea]:
        ys = [0.5 if not 9 <= i <= 11 else missing for i in range(21)]
        return _chart([Series("gradcam", ys, XS)])  # type: ignore[arg-type]

    picture, area = chart(math.nan)
    mask = _near(picture, PALETTE[0])
    assert _rows_of(mask, area.point(0.3, 0.5)[0]).size and _rows_of(mask, area.point(0.7, 0.5)[0]).size
    assert not _rows_of(mask, area.point(0.5, 0.5)[0]).size
    assert np.array_equal(picture, chart(None)[0]) and np.array_equal(picture, chart(math.inf)[0])
    nothing, area = _chart([Series("gradcam", [math.nan] * 3, [0.0, math.inf, 1.0])], y_range=None)
    assert area.y_ticks[0] == 0.0 and area.y_ticks[-1] == 1.0
    assert not _near(nothing[:, : round(area.right)], PALETTE[0]).any()  # the legend has its entry; the plot nothing


def test_a_single_point_is_a_marker() -> None:
    picture, area = _chart([Series("gradcam", [0.42], [0.7], low=[0.3], high=[0.5])], y_range=None)
    column, row = area.point(0.7, 0.42)
    spot = _near(picture, PALETTE[0])[round(row) - 4 : round(row) + 4, round(column) - 4 : round(column) + 4]
    assert spot.sum() >= 9


def test_data_past_the_range_is_cut_at_the_axes_and_the_legend_keeps_clear() -> None:
    picture, area = _chart([Series("gradcam", [1.6, -0.6], [0.0, 1.0]), Series("top", [0.95] * 21, XS)])
    mask = _near(picture, PALETTE[0])
    assert not mask[: round(area.top) - 6].any() and not mask[round(area.bottom) + 6 :, : round(area.right)].any()
    row = round(area.point(0.0, 0.95)[1])
    along = _near(picture, PALETTE[1])[row - 2 : row + 3, round(area.left) + 2 : round(area.right) - 2]
    assert along.any(axis=0).all(), "something covers the data near the top right, where a legend would"


def test_long_names_are_shortened_inside_the_picture() -> None:
    stem = "a method with a name far longer than twenty characters, on and on "
    first, _ = _chart([Series(stem + "one", [0.5] * 21, XS)])
    second, _ = _chart([Series(stem + "two", [0.5] * 21, XS)])
    assert np.array_equal(first, second)  # both cut with '…' before where they differ
    assert (first[:, -6:] == 255).all()


def test_up_to_fifteen_series_get_distinct_colours_and_baselines_grey() -> None:
    names = [(f"method {i}", False) for i in range(15)] + [("random", True), ("centre gaussian", True), ("sobel edges", True)]
    found = styles(names)
    assert len({found[key][0] for key in names[:15]}) == 15
    assert all(found[key][0] in GREYS and found[key][1] is not None for key in names[15:])
    assert styles(names[:4]) == {key: found[key] for key in names[:4]}  # the same order, the same colours


def test_empty_or_wrong_input_is_a_clear_value_error() -> None:
    with pytest.raises(ValueError, match="at least one series"):
        line_chart([], **LABELS)
    with pytest.raises(ValueError, match="at least one panel"):
        summary_chart([], title="t")
    with pytest.raises(ValueError, match="at least one bar"):
        summary_chart([Panel("deletion AUC", "lower is better", [])], title="t")
    with pytest.raises(ValueError, match="categories is empty"):
        line_chart([Series("a", [])], **LABELS, categories=[])
    with pytest.raises(ValueError, match="not a number|must be numbers"):
        line_chart([Series("a", ["high"], [0.0])], **LABELS)  # type: ignore[list-item]
    with pytest.raises(ValueError, match="xs has 2 values"):
        line_chart([Series("a", [0.1], [0.0, 1.0])], **LABELS)
    with pytest.raises(ValueError, match="y_range"):
        line_chart([Series("a", [0.1], [0.0])], **LABELS, y_range=(1.0, 0.0))
    with pytest.raises(ValueError, match="no room"):
        line_chart([Series("a", [0.1], [0.0])], **LABELS, size=(120, 80))


def test_nice_ticks_and_their_labels() -> None:
    assert nice_ticks(0.0, 1.0, 5) == (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    assert nice_ticks(0.03, 0.97, 5) == (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    assert nice_ticks(-0.2, 1.0, 6, cover=False) == (-0.2, 0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    assert nice_ticks(0.1, 0.9, 4, cover=False) == (0.2, 0.4, 0.6, 0.8)
    assert nice_ticks(3.0, 3.0)[0] < 3.0 < nice_ticks(3.0, 3.0)[-1]  # one value still gets an axis
    ticks = (-0.5, -0.25, 0.0, 0.25)
    assert [tick_label(v, ticks) for v in ticks] == ["-0.50", "-0.25", "0.00", "0.25"]
    assert tick_label(-0.0, (0.0, 1.0)) == "0" and tick_label(250.0, (0.0, 250.0)) == "250"


def _panel(best: bool = True, gradcam: float | None = 0.2) -> Panel:
    return Panel(
        "deletion AUC",
        "lower is better",
        [Bar("gradcam", gradcam, 0.15, 0.25, best=best), Bar("scorecam", 0.3, 0.25, 0.35), Bar("random", 0.5, 0.4, 0.6, baseline=True)],
    )


def test_the_best_bar_is_marked() -> None:
    marked, plain = summary_chart([_panel(best=True)], title="t"), summary_chart([_panel(best=False)], title="t")
    assert _near(marked, STAR, 30).sum() > 20 and not _near(plain, STAR, 30).any()
    assert _near(marked, (33, 33, 33), 25).sum() > _near(plain, (33, 33, 33), 25).sum() + 100  # the bold outline
    assert _near(marked, PALETTE[0], 10).sum() > 500 and _near(marked, PALETTE[1], 10).sum() > 500


def test_baseline_bars_are_hatched_in_grey() -> None:
    picture = summary_chart([_panel()], title="t")
    tint = tuple(round(c + (255 - c) * 0.6) for c in GREYS[0])
    assert _near(picture, GREYS[0], 12).sum() > 100 and _near(picture, tint, 6).sum() > 100


def test_bars_without_a_value_say_n_a() -> None:
    missing = summary_chart([_panel(gradcam=None)], title="t")
    assert not _near(missing, PALETTE[0], 30).any() and _near(missing, PALETTE[1], 10).sum() > 500
    assert np.array_equal(missing, summary_chart([_panel(gradcam=math.nan)], title="t"))
    assert np.array_equal(missing, summary_chart([_panel(gradcam=math.inf)], title="t"))
    assert not np.array_equal(missing, summary_chart([Panel("deletion AUC", "lower is better", _panel().bars[1:])], title="t"))


def test_the_same_input_gives_the_same_pixels() -> None:
    series = [Series("gradcam", XS, XS, [x - 0.1 for x in XS], [x + 0.1 for x in XS]), Series("random", XS[::-1], XS, baseline=True)]
    assert np.array_equal(_chart(series)[0], _chart(series)[0])
    assert np.array_equal(summary_chart([_panel()], title="t"), summary_chart([_panel()], title="t"))


METHODS = ("gradcam", "gradcam++", "scorecam", "layercam")
BASELINES = ("random", "centre gaussian", "sobel edges")


def _curves(kind: str) -> list[Series]:
    """Mean curves as eval makes them: methods fall fast (deletion) or rise fast (insertion), baselines slower."""
    series = []
    for index, name in enumerate(METHODS + BASELINES):
        rate = 3.5 + index * 0.7 if index < len(METHODS) else 1.2 + (index - len(METHODS)) * 0.6
        mean = [math.exp(-rate * x) if kind == "deletion" else 1 - math.exp(-rate * x) * 0.9 for x in XS]
        spread = [0.04 + 0.05 * math.sin(math.pi * x) for x in XS] if index < len(METHODS) else None
        low = [max(0.0, m - s) for m, s in zip(mean, spread)] if spread else None
        high = [min(1.0, m + s) for m, s in zip(mean, spread)] if spread else None
        series.append(Series(name, mean, XS, low, high, baseline=index >= len(METHODS)))
    return series


def _summary_panels() -> list[Panel]:
    metrics = [
        ("deletion AUC", False, 1),
        ("insertion AUC", True, 1),
        ("drop in confidence (%)", False, 100),
        ("increase in confidence (%)", True, 100),
        ("ROAD", True, 1),
        ("pointing game", True, 1),
        ("sanity: Spearman", False, 1),
    ]
    panels = []
    for number, (title, higher, scale) in enumerate(metrics):
        values = {name: scale * (0.2 + 0.6 * ((number * 7 + index * 5) % 11) / 11) for index, name in enumerate(METHODS + BASELINES)}
        if title == "ROAD":
            values["scorecam"] = math.nan
        finite = {name: v for name, v in values.items() if name in METHODS and math.isfinite(v)}
        best = (max if higher else min)(finite, key=finite.__getitem__)
        bars = [Bar(name, v, v * 0.9, v * 1.1, baseline=name in BASELINES, best=name == best) for name, v in values.items()]
        panels.append(Panel(title, "higher is better" if higher else "lower is better", bars))
    return panels


def test_the_realistic_example_charts_for_a_person_to_look_at() -> None:
    """Written to tests/artifacts/ (gitignored): 7 series of 21 points with bands, the sanity steps, a 7-panel summary."""
    folder = ROOT / "tests" / "artifacts"
    folder.mkdir(parents=True, exist_ok=True)
    steps = ["head", "layer4", "layer3", "layer2", "layer1", "stem"]
    sanity = [Series(name, [1.0, *(max(-0.1, 0.9 - (i + 1) * (0.15 + 0.05 * k)) for i in range(5))]) for k, name in enumerate(METHODS)]
    model = "resnet50, 500 images (95% intervals)"
    curve = {"y_label": "class probability", "y_range": (0.0, 1.0)}
    charts = {
        "charts-deletion.png": line_chart(
            _curves("deletion"), title=f"Deletion: {model}", x_label="fraction of pixels removed (most relevant first)", **curve
        ),
        "charts-insertion.png": line_chart(
            _curves("insertion"), title=f"Insertion: {model}", x_label="fraction of pixels restored (most relevant first)", **curve
        ),
        "charts-sanity.png": line_chart(
            sanity,
            title="Sanity check: resnet50 randomised from the head down",
            x_label="randomised up to",
            y_label="rank correlation with the trained model's map",
            y_range=(-0.2, 1.0),
            categories=steps,
        ),
        "charts-summary.png": summary_chart(_summary_panels(), title=f"gradcam eval: {model}"),
    }
    for name, picture in charts.items():
        Image.fromarray(picture).save(folder / name)
        assert picture.dtype == np.uint8 and (picture[0, 0] == 255).all()  # white background
    deletion = charts["charts-deletion.png"]
    for name in METHODS:  # every method's colour in the curves is its colour in the summary
        colour = styles((n, False) for n in METHODS)[name, False][0]
        assert _near(deletion, colour, 10).sum() > 50 and _near(charts["charts-summary.png"], colour, 10).sum() > 50
