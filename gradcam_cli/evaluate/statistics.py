"""Means with 95% intervals over images: how sure a table's difference between two methods is.

The interval is the bootstrap percentile interval (Efron and Tibshirani 1993):
the metrics are bounded and often skewed (an AUC near 0, a hit rate near 1),
where mean ± 1.96 standard errors spills outside the range. 2,000 resamples
with a fixed seed, so a rerun prints the same table. Above 2,000 values the
normal approximation is used instead, which the bootstrap converges to there,
at a fraction of the cost. Values that are missing (None or NaN: a pointing
game without a box) are left out and the count says how many remained.

Whether two map sets differ is asked of their paired differences, image by
image (every map set of an evaluation scores the same images, so how hard
each image is cancels): a sign-flip test (Fisher's randomisation test for
paired data). Were there no difference, each image's difference would be as
likely negative as positive; the p-value is the share of sign patterns whose
mean is as far from 0 as the one observed: every pattern up to 11 images,
2,000 seeded ones plus the observed above, and the normal approximation above
2,000 images, as for the intervals. Exact at any count of images, where a
bootstrap interval of so few is too narrow: with fewer than 6 images no
difference reaches 5%, and none is claimed.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

CONFIDENCE = 0.95
RESAMPLES = 2000
BOOTSTRAP_UP_TO = 2000  # values; above, the normal approximation
SEED = 0
Z_95 = 1.959963984540054  # the standard normal's 97.5th percentile
ALPHA = 0.05  # a difference beyond chance: the sign-flip test's two-sided p-value below this
EXACT_UP_TO = 11  # differences: every sign pattern (2,048) is tried; above, FLIPS random ones
FLIPS = 2000


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


def beyond_chance(differences: Iterable[float | None]) -> int:
    """Paired differences, one per image (a's value minus b's): the sign of their mean when a two-sided sign-flip test
    puts it beyond chance (p < ALPHA), else 0. Missing values are left out; zeros flip to themselves and are dropped."""
    data = finite(differences)
    data = data[data != 0]
    n = int(data.size)
    if n == 0:
        return 0
    observed = abs(float(data.sum()))
    if n > BOOTSTRAP_UP_TO:
        spread = float(data.std(ddof=1)) * math.sqrt(n)
        p = math.erfc(observed / spread / math.sqrt(2)) if spread > 0 else 0.0
    else:
        flipped = np.abs(_sign_patterns(n) @ data)
        as_far = int((flipped >= observed * (1 - 1e-9)).sum())  # the observed pattern, summed in another order, counts
        p = as_far / len(flipped) if n <= EXACT_UP_TO else (as_far + 1) / (len(flipped) + 1)
    return (1 if data.sum() > 0 else -1) if p < ALPHA else 0


@lru_cache(maxsize=2)
def _sign_patterns(n: int) -> np.ndarray:
    """Sign patterns of n differences: all 2^n up to EXACT_UP_TO, else FLIPS drawn with a fixed seed (shared by every
    pair of map sets and every measure of n images, so a summary draws them once)."""
    if n <= EXACT_UP_TO:
        patterns = np.array(list(itertools.product((1.0, -1.0), repeat=n)))
    else:
        patterns = np.random.default_rng(SEED).choice((1.0, -1.0), size=(FLIPS, n))
    patterns.setflags(write=False)
    return patterns


def band(rows: list[list[float]]) -> tuple[list[float], list[float], list[float]]:
    """A curve's mean over images at each point and a 95% band (normal approximation: it is only drawn)."""
    data = np.asarray(rows, dtype=np.float64)
    mean = data.mean(axis=0)
    if data.shape[0] < 2:
        return mean.tolist(), mean.tolist(), mean.tolist()
    half = Z_95 * data.std(axis=0, ddof=1) / math.sqrt(data.shape[0])
    return mean.tolist(), (mean - half).tolist(), (mean + half).tolist()
