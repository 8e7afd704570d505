"""What a whole evaluation says: each map set's mean and interval per measure, the best, and who beats the baselines.

Fed one record at a time (a dict, as written to records.jsonl), so a run that
is stopped still summarises what it did, and `eval.json` can be rebuilt from
the records alone. Baselines are map sets like the methods, marked as such:
a method is said to beat them on a measure when its mean is better than every
baseline's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gradcam_cli.evaluate.measures import SURVIVAL_THRESHOLD, Measure
from gradcam_cli.evaluate.statistics import Interval, band, interval


@dataclass
class _MapSet:
    baseline: bool
    values: dict[str, list[float | None]] = field(default_factory=dict)
    curves: dict[str, list[list[float]]] = field(default_factory=dict)
    sanity_steps: list[str] = field(default_factory=list)
    sanity: dict[str, list[list[float]]] = field(default_factory=dict)  # "spearman", "ssim": a row of steps per image
    failed: int = 0


class EvalTotals:
    """The records of one evaluation, gathered per map set."""

    def __init__(self, measures: Sequence[Measure]) -> None:
        self.measures = list(measures)
        self.sets: dict[str, _MapSet] = {}
        self.fractions: list[float] = []
        self.images: set[str] = set()
        self.failed_images: set[str] = set()

    def add(self, record: Mapping[str, Any]) -> None:
        """One record: an image's scores for one map set, or a failed image (no map set)."""
        self.images.add(str(record["input"]))
        name = record.get("method")
        if not record.get("ok"):
            if name is None:
                self.failed_images.add(str(record["input"]))
            else:
                self._set(name, bool(record.get("baseline"))).failed += 1
            return
        assert name is not None
        kept = self._set(name, bool(record.get("baseline")))
        for measure in self.measures:
            kept.values.setdefault(measure.name, []).append((record.get("metrics") or {}).get(measure.name))
        for curve, points in (record.get("curves") or {}).items():
            kept.curves.setdefault(curve, []).append(points)
        self.fractions = record.get("fractions") or self.fractions
        sanity = record.get("sanity")
        if sanity:
            kept.sanity_steps = list(sanity["steps"])
            for key in ("spearman", "ssim"):
                kept.sanity.setdefault(key, []).append(sanity[key])

    def _set(self, name: str, baseline: bool) -> _MapSet:
        if name not in self.sets:
            self.sets[name] = _MapSet(baseline=baseline)
        return self.sets[name]

    def intervals(self) -> dict[str, dict[str, Interval]]:
        """Per map set, per measure: the mean and its 95% interval."""
        return {name: {m.name: interval(kept.values.get(m.name, [])) for m in self.measures} for name, kept in self.sets.items()}

    def best(self, intervals: Mapping[str, Mapping[str, Interval]]) -> dict[str, list[str]]:
        """Per measure, the map sets (methods or baselines) with the best mean: several when they tie."""
        chosen: dict[str, list[str]] = {}
        for measure in self.measures:
            means = {name: intervals[name][measure.name].mean for name in self.sets}
            known = [mean for mean in means.values() if mean is not None]
            top = (max if measure.higher_is_better else min)(known) if known else None
            chosen[measure.name] = [name for name, mean in means.items() if top is not None and mean == top]
        return chosen

    def beats_baselines(self, intervals: Mapping[str, Mapping[str, Interval]]) -> dict[str, dict[str, bool | None]]:
        """Per method, per measure: its mean is better than every baseline's (None: nothing to compare)."""
        baselines = [name for name, kept in self.sets.items() if kept.baseline]
        verdicts: dict[str, dict[str, bool | None]] = {}
        for name, kept in self.sets.items():
            if kept.baseline:
                continue
            verdicts[name] = {}
            for measure in self.measures:
                mean = intervals[name][measure.name].mean
                means = (intervals[b][measure.name].mean for b in baselines)
                others = [other for other in means if other is not None]
                verdicts[name][measure.name] = None if mean is None or not others else all(measure.better(mean, o) for o in others)
        return verdicts

    def mean_curves(self) -> dict[str, dict[str, dict[str, list[float]]]]:
        """Per map set, per curve: the mean over images and its band."""
        out: dict[str, dict[str, dict[str, list[float]]]] = {}
        for name, kept in self.sets.items():
            for curve, rows in kept.curves.items():
                mean, low, high = band(rows)
                out.setdefault(name, {})[curve] = {"mean": _round(mean), "low": _round(low), "high": _round(high)}
        return out

    def sanity_curves(self) -> dict[str, dict[str, Any]]:
        """Per method, the mean correlation and SSIM with the trained model's map after each step of the cascade."""
        out: dict[str, dict[str, Any]] = {}
        for name, kept in self.sets.items():
            if kept.sanity_steps:
                curves = {key: _round(band(rows)[0]) for key, rows in kept.sanity.items()}
                last = curves["spearman"][-1] if curves.get("spearman") else None
                survives = last is not None and last >= SURVIVAL_THRESHOLD
                out[name] = {"steps": kept.sanity_steps, **curves, "survives": survives, "threshold": SURVIVAL_THRESHOLD}
        return out

    def summary(self, context: Mapping[str, Any]) -> dict[str, Any]:
        """eval.json: what was evaluated, and per map set and measure the mean, interval and count."""
        intervals = self.intervals()
        return {
            **context,
            "images": len(self.images),
            "failed_images": len(self.failed_images),
            "measures": {m.name: _about(m) for m in self.measures},
            "results": {
                name: {"baseline": kept.baseline, "failed": kept.failed, **{k: v.as_dict() for k, v in intervals[name].items()}}
                for name, kept in self.sets.items()
            },
            "best": self.best(intervals),
            "beats_baselines": self.beats_baselines(intervals),
            "fractions": self.fractions,
            "curves": self.mean_curves(),
            "sanity": self.sanity_curves(),
        }


def _about(measure: Measure) -> dict[str, Any]:
    return {"label": measure.label, "metric": measure.metric.value, "higher_is_better": measure.higher_is_better}


def _round(values: list[float]) -> list[float]:
    return [round(v, 6) for v in values]
