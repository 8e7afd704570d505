"""Faithfulness: does the model's score follow the map? Deletion and insertion curves, drop and increase in confidence.

Every perturbed input of a batch (image x curve x step) is flattened into one
list of jobs and scored in fixed-size chunks under `inference_mode`, as the
masked forwards of Score-CAM are (extract/perturb.py): the device stays busy
however few images there are, and memory holds one chunk whatever `steps` is.
Maps come in at any size and are upsampled to the input's (bilinear, corners
not aligned), as the references do.

What a perturbed input is scored for is a `Scorer`: each map's own target. A
tensor of classes (one per map) is a classifier's: the class probability. A
detector's maps are scored by evaluate/detection_scoring.py: each detection's
score, read in the perturbed image by the best-overlapping box of its class.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from gradcam_cli.errors import ModelError, UsageError
from gradcam_cli.maps import probabilities
from gradcam_cli.model.state import eval_mode, first_tensor
from gradcam_cli.vocab import Substrate

DEFAULT_STEPS = 20
EPSILON = 1e-7  # torchcam's guard in the relative drop's division
BLUR_SIZE, BLUR_SIGMA = 11, 5.0  # RISE's blurred substrate (Petsiuk et al. 2018, its `gkern(11, 5)`)


def class_probabilities(model: nn.Module, x: torch.Tensor, classes: torch.Tensor) -> torch.Tensor:
    """(N,) the probability of each image's class (softmax; a single logit's sigmoid): what every metric here follows."""
    logits = first_tensor(model(x))
    if logits is None:
        raise ModelError("the model's forward returned no tensor; its class scores are needed to measure a map")
    return probabilities(logits).gather(1, classes[:, None].to(logits.device))[:, 0]


class Scorer(Protocol):
    """What each map's perturbed inputs are scored for: its unit's score (a class probability, a detection's score)."""

    @property
    def count(self) -> int:
        """How many units (maps) there are."""

    def __call__(self, model: nn.Module, inputs: torch.Tensor, units: torch.Tensor) -> torch.Tensor:
        """(B,) float: the score of unit `units[b]` in `inputs[b]` (called under `inference_mode`)."""


@dataclass(frozen=True)
class ClassScores:
    """A classifier's scorer: each map's class probability (softmax; a single logit's sigmoid)."""

    classes: torch.Tensor  # (N,) one class per map

    @property
    def count(self) -> int:
        return len(self.classes)

    def __call__(self, model: nn.Module, inputs: torch.Tensor, units: torch.Tensor) -> torch.Tensor:
        return class_probabilities(model, inputs, self.classes.to(units.device)[units])


def as_scorer(target: torch.Tensor | Scorer) -> Scorer:
    """A tensor of classes (N,) is a classifier's scorer; a Scorer is itself."""
    return ClassScores(target) if isinstance(target, torch.Tensor) else target


def scored_in_chunks(model: nn.Module, x: torch.Tensor, scorer: Scorer, batch_size: int) -> torch.Tensor:
    """(N,) each unit's score in its own unperturbed input x[n], `batch_size` inputs per forward."""
    units = torch.arange(len(x), device=x.device)
    parts = [scorer(model, x[s : s + batch_size], units[s : s + batch_size]).float() for s in range(0, len(x), batch_size)]
    return torch.cat(parts) if parts else torch.zeros(0, device=x.device)


def upsampled(maps: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """(N, h, w) maps → (N, H, W) at the input's size."""
    maps = maps.float()
    if tuple(maps.shape[-2:]) == tuple(size):
        return maps
    return F.interpolate(maps[:, None], size, mode="bilinear", align_corners=False)[:, 0]


def substrate(x: torch.Tensor, kind: Substrate = Substrate.zero) -> torch.Tensor | None:
    """What replaces removed pixels: None for zeros (the default), else the image blurred or its channel means.

    The blur is RISE's 11x11 Gaussian of sigma 5, with the border replicated
    rather than zero-padded, so the edges are not darkened.
    """
    if kind is Substrate.zero:
        return None
    if kind is Substrate.mean:
        return x.mean(dim=(2, 3), keepdim=True).expand_as(x)
    offsets = torch.arange(BLUR_SIZE, dtype=torch.float32, device=x.device) - BLUR_SIZE // 2
    line = torch.exp(-(offsets**2) / (2 * BLUR_SIGMA**2))
    line = (line / line.sum()).to(x.dtype)
    channels = x.shape[1]
    padded = F.pad(x, (BLUR_SIZE // 2,) * 4, mode="replicate")
    rows = F.conv2d(padded, line.view(1, 1, 1, -1).expand(channels, 1, 1, BLUR_SIZE), groups=channels)
    return F.conv2d(rows, line.view(1, 1, -1, 1).expand(channels, 1, BLUR_SIZE, 1), groups=channels)


@dataclass(frozen=True, kw_only=True)
class Curves:
    """Deletion and insertion curves: the class probability at each fraction of pixels removed or restored."""

    fractions: torch.Tensor  # (S,) from 0 to 1
    deletion: torch.Tensor  # (N, S) the most relevant pixels replaced by the baseline first
    insertion: torch.Tensor  # (N, S) the most relevant pixels restored onto the baseline first

    def deletion_auc(self) -> torch.Tensor:
        """(N,) area under the deletion curve (trapezoid rule over the fraction): lower is better."""
        return torch.trapezoid(self.deletion, self.fractions, dim=1)

    def insertion_auc(self) -> torch.Tensor:
        """(N,) area under the insertion curve: higher is better."""
        return torch.trapezoid(self.insertion, self.fractions, dim=1)


def step_counts(positions: int, steps: int) -> list[int]:
    """How many pixels are perturbed at each point: 0, then every ceil(P/steps), then all P."""
    if steps < 1:
        raise UsageError(f"⟨steps={steps}⟩: must be 1 or more")
    size = (positions + steps - 1) // steps
    return [*range(0, positions, size), positions]


def deletion_insertion(
    model: nn.Module,
    x: torch.Tensor,
    maps: torch.Tensor,
    classes: torch.Tensor | Scorer,
    *,
    steps: int = DEFAULT_STEPS,
    baseline: torch.Tensor | None = None,
    batch_size: int = 32,
    after_chunk: Callable[[], None] = lambda: None,
    channels_last: bool = False,
) -> Curves:
    """The deletion and insertion curves of each image's map (RISE, Petsiuk et al. 2018), as torchcam 0.5's
    `DeletionInsertionMetric` defines them: pixels ranked by the upsampled map (a stable sort, highest first),
    the ranked pixels replaced by `baseline` (deletion) or restored onto it (insertion), all channels together;
    `baseline` None is zeros in the model's normalised input space, torchcam's and RISE's default. `after_chunk` is
    called after each chunk of forwards: where a long evaluation may be stopped; `channels_last`: the perturbed
    inputs in the memory format of a channels-last model. `classes` (N,) scores each input by its class probability; a
    `Scorer` by what it reads (a detection's score)."""
    scorer = as_scorer(classes)
    n, _, height, width = x.shape
    base = torch.zeros_like(x) if baseline is None else torch.broadcast_to(baseline.to(x), x.shape)
    order = torch.argsort(upsampled(maps, (height, width)).flatten(1), dim=1, descending=True, stable=True)
    ranks = torch.argsort(order, dim=1)  # (N, P) each pixel's place in the ranking
    counts = step_counts(height * width, steps)
    fractions = torch.tensor(counts, dtype=torch.float32, device=x.device) / (height * width)
    deletion = torch.empty((n, len(counts)), device=x.device)
    insertion = torch.empty_like(deletion)
    # (image, curve, point, pixels): curve 0 deletion, 1 insertion, 2 the all-baseline input both curves share
    jobs = [(i, 2, len(counts) - 1, counts[-1]) for i in range(n)]
    jobs += [(i, curve, point, counts[point]) for i in range(n) for point in range(1, len(counts) - 1) for curve in (0, 1)]
    with eval_mode(model), torch.inference_mode():
        original = scored_in_chunks(model, x, scorer, batch_size)
        deletion[:, 0], insertion[:, -1] = original, original
        flat_x, flat_base = x.flatten(2), base.flatten(2)
        for start in range(0, len(jobs), batch_size):
            chunk = jobs[start : start + batch_size]
            images = torch.tensor([job[0] for job in chunk], device=x.device)
            relevant = ranks[images] < torch.tensor([job[3] for job in chunk], device=x.device)[:, None]
            keep_photo = torch.where(torch.tensor([job[1] == 1 for job in chunk], device=x.device)[:, None], relevant, ~relevant)
            inputs = torch.where(keep_photo[:, None], flat_x[images], flat_base[images]).reshape(-1, *x.shape[1:])
            if channels_last:
                inputs = inputs.contiguous(memory_format=torch.channels_last)
            for (image, curve, point, _), score in zip(chunk, scorer(model, inputs, images).tolist()):
                if curve in (0, 2):
                    deletion[image, point] = score
                if curve in (1, 2):
                    insertion[image, 0 if curve == 2 else point] = score
            after_chunk()
    return Curves(fractions=fractions, deletion=deletion, insertion=insertion)


@dataclass(frozen=True, kw_only=True)
class ConfidenceChange:
    """What showing the model only the map's part of the image (the map times the input) does to its confidence."""

    original: torch.Tensor  # (N,) class probability of the image
    masked: torch.Tensor  # (N,) of the image multiplied by its map

    def drop_relative(self) -> torch.Tensor:
        """Average Drop (Chattopadhay et al. 2018, Grad-CAM++) as torchcam's ClassificationMetric: the fall, over the
        original probability."""
        return torch.relu(self.original - self.masked) / (self.original + EPSILON)

    def drop_absolute(self) -> torch.Tensor:
        """The fall itself, as pytorch-grad-cam's DropInConfidence (CamMultImageConfidenceChange, clipped at 0)."""
        return torch.relu(self.original - self.masked)

    def increase(self) -> torch.Tensor:
        """Increase in Confidence: 1 where the masked image scores higher (both references agree on this one)."""
        return (self.masked > self.original).float()


def confidence_change(
    model: nn.Module, x: torch.Tensor, maps: torch.Tensor, classes: torch.Tensor | Scorer, *, batch_size: int = 32
) -> ConfidenceChange:
    """The class probability (or a Scorer's score) of each image and of the image multiplied by its upsampled map (in
    [0, 1]), `batch_size` inputs per forward."""
    scorer = as_scorer(classes)
    masks = upsampled(maps, tuple(x.shape[-2:]))  # type: ignore[arg-type]
    with eval_mode(model), torch.inference_mode():
        original = scored_in_chunks(model, x, scorer, batch_size)
        masked = scored_in_chunks(model, x * masks[:, None].to(x), scorer, batch_size)
    return ConfidenceChange(original=original, masked=masked)
