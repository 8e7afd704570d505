"""What a whole evaluation says: each map set's mean and interval per measure, the best, and who beats the baselines.

Fed one record at a time (a dict, as written to records.jsonl), so a run that
is stopped still summarises what it did, and `eval.json` can be rebuilt from
the records alone. Baselines are map sets like the methods, marked as such.
A record is one unit: an image of a classifier, one kept detection of a
detector (its `detection` rank); map sets are paired unit by unit.

The verdicts need a real difference, one beyond chance on these images: two
map sets differ on a measure when their differences image by image pass a
sign-flip test at 5% (statistics.beyond_chance). The best of a measure is the
map set with the best mean and every one not told apart from it; when none is
behind it, nothing is best (a column where every map set scores 0). A method
beats the baselines when it does better than each, is beaten when one does
better than it, and neither (None) when these images cannot tell.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gradcam_cli.evaluate.measures import SURVIVAL_THRESHOLD, Measure
from gradcam_cli.evaluate.statistics import Interval, band, beyond_chance, interval


Image = tuple[str, int | None, int]  # an input, its detection (None: a classifier's image), and which time it came (one
# given twice pairs with itself twice)


@dataclass
class _MapSet:
    baseline: bool
    values: dict[str, dict[Image, float | None]] = field(default_factory=dict)  # per measure, per image
    seen: dict[tuple[str, int | None], int] = field(default_factory=dict)  # how many of each unit's records came so far
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
        self.detections: set[tuple[str, int]] = set()  # a detector's units: (input, detection)

    def add(self, record: Mapping[str, Any]) -> None:
        """One record: a unit's scores for one map set, a failed image (no map set), or an image with no unit (a
        detector's without a kept detection: ok, no map set)."""
        self.images.add(str(record["input"]))
        name = record.get("method")
        if not record.get("ok"):
            if name is None:
                self.failed_images.add(str(record["input"]))
            else:
                self._set(name, bool(record.get("baseline"))).failed += 1
            return
        if name is None:
            return
        kept = self._set(name, bool(record.get("baseline")))
        unit = (str(record["input"]), record.get("detection"))
        if unit[1] is not None:
            self.detections.add((unit[0], int(unit[1])))
        image = (*unit, kept.seen.get(unit, 0))
        kept.seen[unit] = image[2] + 1
        for measure in self.measures:
            kept.values.setdefault(measure.name, {})[image] = (record.get("metrics") or {}).get(measure.name)
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
        return {name: {m.name: interval(kept.values.get(m.name, {}).values()) for m in self.measures} for name, kept in self.sets.items()}

    def better(self, a: str, b: str, measure: Measure) -> int:
        """1 when map set a does better than b on the measure beyond chance, image by image; -1 worse; 0 not told apart."""
        first, second = self.sets[a].values.get(measure.name, {}), self.sets[b].values.get(measure.name, {})
        sign = beyond_chance([_minus(value, second[image]) for image, value in first.items() if image in second])
        return sign if measure.higher_is_better else -sign

    def best(self, intervals: Mapping[str, Mapping[str, Interval]]) -> dict[str, list[str]]:
        """Per measure, the map set (method or baseline) with the best mean and those not told apart from it; none when
        no map set is behind it beyond chance."""
        chosen: dict[str, list[str]] = {}
        for measure in self.measures:
            means = {name: mean for name in self.sets if (mean := intervals[name][measure.name].mean) is not None}
            top = (max if measure.higher_is_better else min)(means, key=means.__getitem__) if means else None
            behind = {name for name in means if top is not None and self.better(name, top, measure) < 0}
            chosen[measure.name] = [name for name in means if name not in behind] if behind else []
        return chosen

    def beats_baselines(self, intervals: Mapping[str, Mapping[str, Interval]]) -> dict[str, dict[str, bool | None]]:
        """Per method, per measure: True when it does better than every baseline beyond chance, False when a baseline does
        better than it, None when these images cannot tell (or there is nothing to compare)."""
        baselines = [name for name, kept in self.sets.items() if kept.baseline]
        verdicts: dict[str, dict[str, bool | None]] = {}
        for name, kept in self.sets.items():
            if kept.baseline:
                continue
            verdicts[name] = {}
            for measure in self.measures:
                known = [b for b in baselines if intervals[b][measure.name].mean is not None]
                signs = [self.better(name, b, measure) for b in known] if intervals[name][measure.name].mean is not None else []
                verdicts[name][measure.name] = None if not signs else False if min(signs) < 0 else True if min(signs) > 0 else None
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
            **({"detections": len(self.detections)} if self.detections else {}),
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


def _minus(a: float | None, b: float | None) -> float | None:
    """One image's difference, a's value minus b's; None when either has none."""
    return None if a is None or b is None else a - b


def _about(measure: Measure) -> dict[str, Any]:
    return {"label": measure.label, "metric": measure.metric.value, "higher_is_better": measure.higher_is_better}


def _round(values: list[float]) -> list[float]:
    return [round(v, 6) for v in values]
