"""Means with 95% intervals over images: how sure a table's difference between two methods is.

The interval is the bootstrap percentile interval (Efron and Tibshirani 1993):
the metrics are bounded and often skewed (an AUC near 0, a hit rate near 1),
where mean ± 1.96 standard errors spills outside the range. 2,000 resamples
with a fixed seed, so a rerun prints the same table. Above 2,000 values the
normal approximation is used instead, which the bootstrap converges to there,
at a fraction of the cost. Values that are missing (None or NaN: a pointing
game without a box) are left out and the count says how many remained.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95
RESAMPLES = 2000
BOOTSTRAP_UP_TO = 2000  # values; above, the normal approximation
SEED = 0
Z_95 = 1.959963984540054  # the standard normal's 97.5th percentile


@dataclass(frozen=True)
class Interval:
    mean: float | None
    low: float | None
    high: float | None
    n: int

    def as_dict(self) -> dict[str, float | int | None]:
        return {"mean": _rounded(self.mean), "low": _rounded(self.low), "high": _rounded(self.high), "n": self.n}


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def finite(values: Iterable[float | None]) -> np.ndarray:
    """The values that are numbers, as float64."""
    kept = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    return np.asarray(kept, dtype=np.float64)


def interval(values: Iterable[float | None]) -> Interval:
    """The mean and its 95% interval; one value has no interval, none has no mean."""
    data = finite(values)
    n = int(data.size)
    if n == 0:
        return Interval(None, None, None, 0)
    mean = float(data.mean())
    if n == 1 or float(data.min()) == float(data.max()):
        return Interval(mean, mean if n > 1 else None, mean if n > 1 else None, n)
    if n > BOOTSTRAP_UP_TO:
        half = Z_95 * float(data.std(ddof=1)) / math.sqrt(n)
        return Interval(mean, mean - half, mean + half, n)
    means = _bootstrap_means(data)
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return Interval(mean, float(low), float(high), n)


def _bootstrap_means(data: np.ndarray, chunk: int = 250) -> np.ndarray:
    """The means of RESAMPLES resamples with replacement, drawn in chunks so memory stays small."""
    rng = np.random.default_rng(SEED)
    means = np.empty(RESAMPLES)
    for start in range(0, RESAMPLES, chunk):
        count = min(chunk, RESAMPLES - start)
        means[start : start + count] = data[rng.integers(0, data.size, size=(count, data.size))].mean(axis=1)
    return means


def band(rows: list[list[float]]) -> tuple[list[float], list[float], list[float]]:
    """A curve's mean over images at each point and a 95% band (normal approximation: it is only drawn)."""
    data = np.asarray(rows, dtype=np.float64)
    mean = data.mean(axis=0)
    if data.shape[0] < 2:
        return mean.tolist(), mean.tolist(), mean.tolist()
    half = Z_95 * data.std(axis=0, ddof=1) / math.sqrt(data.shape[0])
    return mean.tolist(), (mean - half).tolist(), (mean + half).tolist()
