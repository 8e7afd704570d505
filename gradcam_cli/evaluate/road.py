"""ROAD: remove the pixels a map ranks first (or last), fill them in from their neighbours, and see what the model loses.

ROAD, "RemOve And Debias" (Rong, Leemann, Borisov, Kasneci and Kasneci, "A Consistent and Efficient
Evaluation Strategy for Attribution Methods", ICML 2022), as pytorch-grad-cam 1.5 implements it
(pytorch_grad_cam/metrics/road.py and perturbation_confidence.py). Deleting pixels to a constant
leaks the map's shape to the model, which then reacts to the mask, not to what was removed; ROAD
instead sets each removed pixel to the weighted mean of its 8 neighbours (1/6 for the 4 direct, 1/12
for the diagonal ones), one sparse linear system per image and mask, plus a little Gaussian noise,
so the filled region carries no trace of its outline. The score is the class's softmax probability
of the imputed image minus the original's.

As the reference: the map's pixels at or above its percentile are removed (ties at the threshold go
with the removed ones), least relevant first ranks by 1 - map, and a removed set that covers the
whole image (nothing left to interpolate from) is filled with zeros, the data set's mean once the
input is normalised by it. One difference: our percentile p removes the top (MoRF) or bottom (LeRF) p % of the
pixels, the paper's sense; pytorch-grad-cam's `ROADMostRelevantFirst(percentile=q)` keeps q % and
removes 100 - q %. Over the default percentiles 10..90, symmetric about 50, the averages agree.

The solve is the cost. The unknowns are numbered in a nested-dissection order (halves split by a
one-pixel line, the line last), which SuperLU factors in about half the time its own orderings take
(measured at 224x224: 40 % less fill than spsolve's COLAMD, half the time of minimum degree at the
same fill), and the solves of a chunk run in threads (SuperLU releases the GIL). Every imputed image
(image x direction x percentile) is a job; jobs are imputed and scored in chunks of `batch_size`
under `inference_mode`, as faithfulness.py does, so memory holds one chunk whatever the percentiles.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
import torch
from torch import nn

from gradcam_cli.errors import UsageError
from gradcam_cli.evaluate.faithfulness import Scorer, as_scorer, scored_in_chunks, upsampled
from gradcam_cli.model.state import eval_mode

ROAD_PERCENTILES: tuple[int, ...] = (10, 20, 30, 40, 50, 60, 70, 80, 90)
ROAD_NOISE = 0.01  # pytorch-grad-cam's NoisyLinearImputer default: the std of the noise, in the normalised input's units
# (row offset, column offset, weight): a removed pixel is the weighted mean of its neighbours inside the image
NEIGHBOURS = (
    (-1, -1, 1 / 12),
    (-1, 0, 1 / 6),
    (-1, 1, 1 / 12),
    (0, -1, 1 / 6),
    (0, 1, 1 / 6),
    (1, -1, 1 / 12),
    (1, 0, 1 / 6),
    (1, 1, 1 / 12),
)
DISSECTION_LEAF = 64  # pixels below which a region is not split further: smaller pieces cost more in Python than they save
MOST_RELEVANT_FIRST, LEAST_RELEVANT_FIRST = 0, 1


@dataclass(frozen=True, kw_only=True)
class RoadCurves:
    """The class probability of each image, and after imputing away the top (MoRF) or bottom (LeRF) p % of its map."""

    percentiles: tuple[int, ...]
    original: torch.Tensor  # (N,) class probability of each image
    most_relevant_first: torch.Tensor  # (N, P) after imputing away the top p % pixels
    least_relevant_first: torch.Tensor  # (N, P) after imputing away the bottom p % pixels

    def morf(self) -> torch.Tensor:
        """(N,) ROADMostRelevantFirstAverage: the mean change when the relevant pixels go; lower (more negative) is better."""
        return (self.most_relevant_first - self.original[:, None]).mean(dim=1)

    def lerf(self) -> torch.Tensor:
        """(N,) ROADLeastRelevantFirstAverage: the mean change when the irrelevant pixels go; higher (near 0) is better."""
        return (self.least_relevant_first - self.original[:, None]).mean(dim=1)

    def combined(self) -> torch.Tensor:
        """(N,) ROADCombined, (LeRF - MoRF) / 2: both orders in one number, higher is better."""
        return (self.lerf() - self.morf()) / 2


def _scipy_sparse() -> tuple[ModuleType, ModuleType]:
    """scipy.sparse and scipy.sparse.linalg, imported on first use: scipy is an optional dependency."""
    try:
        import scipy.sparse
        import scipy.sparse.linalg
    except ImportError:
        raise UsageError(
            "ROAD's imputation solves a sparse system with scipy, which is not installed",
            hint="pip install scipy (or pip install 'gradcam-cli[eval]')",
        ) from None
    return scipy.sparse, scipy.sparse.linalg


def removed_pixels(ranking: np.ndarray, percentile: float) -> np.ndarray:
    """(H, W) bool: the pixels at or above the ranking's (100 - percentile)-th percentile, the reference's threshold rule."""
    return ranking >= np.percentile(ranking, 100 - percentile)


def _dissection_order(rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """The pixels' indices in nested-dissection order: each region's two halves, then the line that parts them.

    With 8 neighbours, one row (or column) of pixels separates the rows above it from those below, so
    no equation of one half names a pixel of the other and the factor's fill stays inside the halves.
    """
    order: list[np.ndarray] = []

    def split(members: np.ndarray) -> None:
        if len(members) <= DISSECTION_LEAF:
            order.append(members)
            return
        r, c = rows[members], cols[members]
        key = r if np.ptp(r) >= np.ptp(c) else c  # cut across the longer side: the shorter line
        middle = np.partition(key, len(key) // 2)[len(key) // 2]
        below, above = members[key < middle], members[key > middle]
        if len(below) + len(above) == 0:
            order.append(members)
            return
        split(below)
        split(above)
        order.append(members[key == middle])

    split(np.arange(len(rows)))
    return np.concatenate(order)


def _linear_system(image: np.ndarray, removed: np.ndarray, sparse: ModuleType) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray]:
    """(A, b, rows, cols): A x = b says every removed pixel (rows[k], cols[k]) is the weighted mean of its neighbours.

    Each equation is sum_j w_j x_j - (sum of its in-image weights) x_k = 0, the known neighbours moved
    to the right-hand side b (one column per channel); border pixels weigh only the neighbours they have.
    """
    height, width = removed.shape
    rows, cols = np.nonzero(removed)
    order = _dissection_order(rows, cols)
    rows, cols = rows[order], cols[order]
    unknowns = len(rows)
    number = np.full((height, width), -1, dtype=np.int64)
    number[rows, cols] = np.arange(unknowns)
    diagonal = np.zeros(unknowns)
    b = np.zeros((unknowns, image.shape[0]))
    at, to, weights = [], [], []
    for dy, dx, weight in NEIGHBOURS:
        ny, nx = rows + dy, cols + dx
        inside = np.nonzero((ny >= 0) & (ny < height) & (nx >= 0) & (nx < width))[0]
        ny, nx = ny[inside], nx[inside]
        diagonal[inside] -= weight
        neighbour = number[ny, nx]
        unknown = neighbour >= 0
        at.append(inside[unknown])
        to.append(neighbour[unknown])
        weights.append(np.full(int(unknown.sum()), weight))
        known = ~unknown
        b[inside[known]] -= weight * image[:, ny[known], nx[known]].T
    at.append(np.arange(unknowns))
    to.append(np.arange(unknowns))
    weights.append(diagonal)
    matrix = sparse.csc_matrix((np.concatenate(weights), (np.concatenate(at), np.concatenate(to))), shape=(unknowns, unknowns))
    return matrix, b, rows, cols


def noisy_linear_imputation(
    image: torch.Tensor, removed: torch.Tensor, *, noise: float = ROAD_NOISE, generator: torch.Generator | None = None
) -> torch.Tensor:
    """(C, H, W) float32 on the CPU: the image with its `removed` (H, W) pixels solved from their neighbours, plus noise.

    The noise is N(0, noise²) per removed value, drawn from `generator` as one (C, removed) tensor in row-major
    pixel order, as pytorch-grad-cam's NoisyLinearImputer draws it from the global one: seeded alike, the same noise.
    """
    sparse, linalg = _scipy_sparse()
    pixels = image.detach().float().cpu().numpy()
    mask = removed.detach().cpu().numpy().astype(bool)
    filled = pixels.copy()  # numpy, not torch: its fancy indexing is far faster on the CPU
    rows, cols = np.nonzero(mask)  # row-major, the order the reference's noise follows
    if len(rows) == mask.size:
        filled[:] = 0  # nothing left to interpolate from: any constant solves the system; zero (the reference's) is the input's mean
    elif len(rows):
        matrix, b, solved_rows, solved_cols = _linear_system(pixels, mask, sparse)
        # -A is symmetric and diagonally dominant (every region of removed pixels touches a kept one): no pivoting is needed
        factor = linalg.splu(matrix, permc_spec="NATURAL", diag_pivot_thresh=0, options={"SymmetricMode": True})
        filled[:, solved_rows, solved_cols] = factor.solve(b).T
    if noise and len(rows):
        filled[:, rows, cols] += noise * torch.randn((pixels.shape[0], len(rows)), generator=generator).numpy()
    return torch.from_numpy(filled)


def _job_generator(seed: int, image: int, direction: int, percentile: int) -> torch.Generator:
    """A generator of its own per imputed image: the noise repeats with the seed, whatever the chunks, threads or other percentiles."""
    state = np.random.SeedSequence([seed % 2**64, image, direction, percentile]).generate_state(1, np.uint64)[0]
    return torch.Generator().manual_seed(int(state))


def _checked(
    x: torch.Tensor, maps: torch.Tensor, scorer: Scorer, percentiles: Sequence[int], noise: float, batch_size: int
) -> tuple[int, ...]:
    """The percentiles as a tuple of ints strictly between 0 and 100, after the other arguments' checks: a wrong
    shape fails here with a sentence, not in a worker thread with an index error."""
    if x.ndim != 4 or len(x) == 0 or maps.ndim != 3 or len(maps) != len(x) or scorer.count != len(x):
        raise UsageError(
            f"ROAD takes images (N, C, H, W), maps (N, h, w) and classes (N,) for the same N ≥ 1, "
            f"not {tuple(x.shape)}, {tuple(maps.shape)} and {scorer.count} classes"
        )
    if not noise >= 0 or not np.isfinite(noise):
        raise UsageError(f"⟨noise={noise}⟩: the noise's standard deviation must be 0 or more")
    if batch_size < 1:
        raise UsageError(f"⟨batch_size={batch_size}⟩: must be 1 or more")
    try:
        checked = tuple(operator.index(p) for p in percentiles)
    except TypeError:
        raise UsageError(f"⟨percentiles={list(percentiles)}⟩: whole numbers of percent, such as 10, 20, …, 90") from None
    if not checked or not all(0 < p < 100 for p in checked):
        raise UsageError(f"⟨percentiles={list(checked)}⟩: one or more, each between 1 and 99 (0 removes nothing, 100 everything)")
    return checked


def road(
    model: nn.Module,
    x: torch.Tensor,
    maps: torch.Tensor,
    classes: torch.Tensor | Scorer,
    *,
    percentiles: Sequence[int] = ROAD_PERCENTILES,
    noise: float = ROAD_NOISE,
    seed: int = 0,
    batch_size: int = 32,
    after_chunk: Callable[[], None] = lambda: None,
    channels_last: bool = False,
) -> RoadCurves:
    """ROAD's MoRF and LeRF curves of each image's map: x (N, 3, H, W) the normalised model input, maps (N, h, w) at any
    size (upsampled to the input's, as the other metrics), classes (N,) long, or a Scorer (faithfulness.py: a detection's score).

    The imputation works on the CPU in float32, whatever x's device; the imputed images go back to it to be scored.
    `after_chunk` and `channels_last` as deletion_insertion's: a stop point after each chunk, the inputs' memory format.
    """
    scorer = as_scorer(classes)
    checked = _checked(x, maps, scorer, percentiles, noise, batch_size)
    _scipy_sparse()  # the missing-scipy error before any forward
    n, _, height, width = x.shape
    ranked = upsampled(maps, (height, width)).detach().cpu()
    rankings = {MOST_RELEVANT_FIRST: ranked.numpy(), LEAST_RELEVANT_FIRST: (1 - ranked).numpy()}
    pixels = x.detach().float().cpu()
    curves = {direction: torch.empty((n, len(checked))) for direction in rankings}
    jobs = [(i, direction, k) for i in range(n) for direction in rankings for k in range(len(checked))]

    def imputed(job: tuple[int, int, int]) -> torch.Tensor:
        i, direction, k = job
        removed = torch.from_numpy(removed_pixels(rankings[direction][i], checked[k]))
        return noisy_linear_imputation(pixels[i], removed, noise=noise, generator=_job_generator(seed, i, direction, checked[k]))

    pool = ThreadPoolExecutor(max_workers=max(1, min(batch_size, os.cpu_count() or 1)))
    try:
        with eval_mode(model), torch.inference_mode():
            original = scored_in_chunks(model, x, scorer, batch_size)
            for start in range(0, len(jobs), batch_size):
                chunk = jobs[start : start + batch_size]
                # solved in threads, then scored alone: a forward's threads and the solves' do not fight over the cores
                inputs = torch.stack(list(pool.map(imputed, chunk))).to(x)
                if channels_last:
                    inputs = inputs.contiguous(memory_format=torch.channels_last)
                scores = scorer(model, inputs, torch.tensor([job[0] for job in chunk], device=x.device)).tolist()
                for (i, direction, k), score in zip(chunk, scores):
                    curves[direction][i, k] = score
                after_chunk()
    finally:  # an error or Ctrl-C does not wait for the rest of a chunk's solves
        pool.shutdown(wait=True, cancel_futures=True)
    return RoadCurves(
        percentiles=checked,
        original=original,
        most_relevant_first=curves[MOST_RELEVANT_FIRST].to(original.device),
        least_relevant_first=curves[LEAST_RELEVANT_FIRST].to(original.device),
    )
