"""A segmenter's targets: a class's score summed over a region, one rank per region of each image.

The region of class c is, by default, where the model says c (its predicted
mask); ⟨region⟩ names a box, ⟨mask⟩ a mask file, `truth` the class's true mask.
Every class covering at least ⟨min_area⟩ of the image (of the named region)
is explained, or the ⟨classes⟩ asked for; a background class only when asked.
With a true mask, the pixels the truth gives c and the model another class are
a target of their own ("why was this not c?"). Each image's regions come from
its own prediction and its own truth, so one forward gives every region of the
batch its score, and one backward per rank (the k-th region of every image at
once) its map. The score is pytorch-grad-cam's
`SemanticSegmentationTarget`: the class's logit at each pixel times the
region, summed. A 3-D segmenter's volume follows the same rule: its regions
are masks of voxels (D, H, W), its ⟨min_area⟩ a share of the volume.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

from gradcam_cli.cams.targets import Reading
from gradcam_cli.found import Segment, Segments
from gradcam_cli.model.segmenters import Segmenter

DEFAULT_MIN_AREA = 0.005  # half a percent of the image: a region smaller is a few boundary pixels, not an object
ScoreReader = Callable[[Any, torch.Tensor], torch.Tensor]  # (a forward's result, the image of each row) → each row's score


@dataclass(frozen=True)
class ImageRegions:
    """What one image brings to its targets before the model runs (run/regions.py reads it): the region the user
    names and its true mask, both in the input's pixels, and the true mask in the photo's for the records."""

    named: torch.Tensor | None = None  # (H, W) bool: ⟨region⟩'s box or ⟨mask⟩
    named_kind: str = "box"  # "box" or "mask"
    truth: torch.Tensor | None = None  # (H, W) long: the class of each pixel, -1 ignored
    truth_photo: Any = None  # numpy (h, w) in the photo's pixels, for the records' IoU and Dice
    fixed: tuple[tuple[int, str, torch.Tensor], ...] | None = None  # exactly these (class, kind, region): an evaluation's


@dataclass(frozen=True)
class SegmentTargets:
    """Which regions of each image the maps explain."""

    segmenter: Segmenter
    input_hw: tuple[int, ...]  # (H, W); a 3-D segmenter's (D, H, W): its regions are masks of voxels
    classes: tuple[int, ...] = ()  # ⟨classes⟩: only these (even below ⟨min_area⟩); empty: every class present
    min_area: float = DEFAULT_MIN_AREA
    unasked: tuple[int, ...] = ()  # classes explained only when asked for (a background)
    over_truth: bool = False  # ⟨region=truth⟩: each class's true mask instead of its predicted one
    with_truth: bool = False  # the run has true masks: missed regions are targets too
    images: tuple[ImageRegions | None, ...] = ()  # this batch's, in order (`for_images`); empty: none named

    # one backward per rank: measured on the example segmenter (8 images of 256x256, 2 regions each), autograd's batched
    # backward (vmap) through a U-Net's full-resolution decoder took 1.75 s where a backward per rank took 1.3 s
    batched = False

    @property
    def count(self) -> int:
        """The most ranks an image can have: each class once, and once more missed."""
        classes = len(self.classes) or self.segmenter.classes
        return classes * (2 if self.with_truth else 1)

    def for_images(self, images: Sequence[ImageRegions | None]) -> SegmentTargets:
        """These targets for one batch: each image's named region and truth."""
        return replace(self, images=tuple(images))

    def forwarding(self, model: nn.Module) -> contextlib.AbstractContextManager[object]:
        return contextlib.nullcontext()

    def perturbed(self, reading: Reading, rank: int, model: nn.Module) -> tuple[ScoreReader, contextlib.AbstractContextManager[object]]:
        """A masked forward (scorecam, ablationcam) scores rank `rank` as the map does: its class over its region."""
        wanted = [found.segments[rank] if rank < len(found) else None for found in reading.found or []]

        def scores(output: Any, images: torch.Tensor) -> torch.Tensor:
            maps = self.segmenter.scores(output, "the model", self.input_hw)
            out = [_summed(maps[row], wanted[image]) for row, image in enumerate(images.tolist())]
            return torch.stack(out).to(images.device)

        return scores, contextlib.nullcontext()

    def read(self, output: Any, model_name: str = "the model") -> Reading:
        """Each image's regions as ranks: their summed scores (N, K), classes, and which ranks each image has."""
        maps = self.segmenter.scores(output, model_name, self.input_hw)
        probabilities = self.segmenter.probabilities(maps)
        labels = self.segmenter.labels(probabilities)
        per_image = []
        for n in range(int(maps.shape[0])):
            image = self.images[n] if n < len(self.images) else None
            per_image.append(self._segments(maps[n], probabilities[n], labels[n], image))
        return _reading(per_image, maps, labels, self.images)

    def _segments(
        self, maps: torch.Tensor, probabilities: torch.Tensor, labels: torch.Tensor, image: ImageRegions | None
    ) -> list[tuple[Segment, torch.Tensor]]:
        """One image's regions, each with its score in the graph."""
        out = []
        for class_index, kind, region in self._regions(labels, image):
            score = (maps[class_index] * region).sum()
            mean = float(probabilities[class_index][region].mean()) if bool(region.any()) else 0.0
            out.append((Segment(class_index, kind, region, float(score.detach()), mean), score))
        return out

    def _regions(self, labels: torch.Tensor, image: ImageRegions | None) -> list[tuple[int, str, torch.Tensor]]:
        """(class, kind, region) for every class this image explains, then its missed regions."""
        if image is not None and image.fixed is not None:
            return [(c, kind, region.to(labels.device)) for c, kind, region in image.fixed]
        named = image.named if image is not None else None
        truth = image.truth if image is not None else None
        base = int(named.sum()) if named is not None else labels.numel()
        least = max(1.0, self.min_area * base)
        classes = self.classes or tuple(c for c in range(self.segmenter.classes) if c not in self.unasked)
        regions = []
        for c in classes:
            predicted = labels == c
            if named is not None:
                region, kind, area = named, image.named_kind if image is not None else "box", int((predicted & named).sum())
            elif self.over_truth and truth is not None:
                region, kind = truth == c, "truth"
                area = int(region.sum())
            else:
                region, kind, area = predicted, "predicted", int(predicted.sum())
            asked = c in self.classes  # a class asked for over a named region is explained even where the model says
            needed = 0 if asked and named is not None else 1 if asked else least  # another ("why not c here?")
            if area >= needed:
                regions.append((c, kind, region))
        if truth is not None and named is None and not self.over_truth:
            for c in classes:
                missed = (truth == c) & (labels != c)
                if int(missed.sum()) >= least:
                    regions.append((c, "missed", missed))
        return regions


def _summed(maps: torch.Tensor, segment: Segment | None) -> torch.Tensor:
    """A segment's score in one image's (C, H, W) scores; 0 for an image without that rank."""
    if segment is None:
        return maps.new_zeros((), dtype=torch.float32)
    return (maps[segment.class_index].float() * segment.region.to(maps.device)).sum()


def _reading(
    per_image: list[list[tuple[Segment, torch.Tensor]]], maps: torch.Tensor, labels: torch.Tensor, images: Sequence[ImageRegions | None]
) -> Reading:
    """Per-image regions (as many as each has) as a (N, K) reading: a missing rank a constant zero, unchosen."""
    n, device = len(per_image), maps.device
    ranks = max((len(found) for found in per_image), default=0)
    zero = maps.new_zeros(())
    scores = maps.new_zeros((n, 0))
    if ranks:
        scores = torch.stack([torch.stack([row[k][1] if k < len(row) else zero for k in range(ranks)]) for row in per_image])
    classes = torch.tensor([[row[k][0].class_index if k < len(row) else 0 for k in range(ranks)] for row in per_image], dtype=torch.long)
    counts = torch.tensor([len(row) for row in per_image], device=device)
    chosen = torch.arange(ranks, device=device)[None, :] < counts[:, None]
    found = []
    for i, row in enumerate(per_image):
        truth = images[i].truth_photo if i < len(images) and images[i] is not None else None  # type: ignore[union-attr]
        found.append(Segments([segment for segment, _ in row], labels[i].to(torch.int16), truth))
    return Reading(scores=scores, targets=classes.reshape(n, ranks), logits=scores.detach(), chosen=chosen, found=found)
