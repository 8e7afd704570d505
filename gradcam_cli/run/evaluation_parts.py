"""The parts of `gradcam eval` every task's units share (run/evaluation_units.py, run/evaluation_segments.py): a decoded
image, a batch's units, its map sets, what a unit's records say of it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from gradcam_cli.errors import UsageError
from gradcam_cli.evaluate.faithfulness import Scorer
from gradcam_cli.outputs.boxes import DrawnBox
from gradcam_cli.vocab import Metric

if TYPE_CHECKING:
    from gradcam_cli.geometry import Geometry
    from gradcam_cli.inputs.sources import Source


@dataclass(frozen=True)
class Decoded:
    """An image ready for the model: the photo, where the input lies on it, the input."""

    source: Source
    photo: np.ndarray
    geometry: Geometry
    array: np.ndarray


@dataclass(frozen=True)
class Units:
    """What a batch's maps explain, one unit each: rows of the batch (an image may have none, one or several)."""

    image: torch.Tensor  # (U,) long: the batch row of each unit
    rank: torch.Tensor  # (U,) long: its rank among the first method's maps of that row
    classes: torch.Tensor  # (U,) long: the class it explains
    boxes: torch.Tensor | None = None  # (U, 4) in the model input's pixels: a detection's own box; None for a classifier
    regions: tuple[Any, ...] | None = None  # a segmenter's: each unit's region (found.Segment), as the first method read it
    on_photo: tuple[np.ndarray, ...] | None = None  # a segmenter's: each unit's region on its photo (bool), made once

    def __len__(self) -> int:
        return len(self.image)

    def of(self, row: int) -> list[int]:
        """The units of one batch row, in rank order."""
        return (self.image == row).nonzero().flatten().tolist()


@dataclass(frozen=True)
class BatchMaps:
    """A batch's map sets, (U, H, W) each at the input size (a map per unit), and what the methods said of them."""

    maps: dict[str, torch.Tensor]
    blank: dict[str, torch.Tensor]  # per method: (U,) bool
    finite: dict[str, torch.Tensor]  # per method: (U,) bool, scores and gradients finite
    units: Units
    scorer: Scorer  # what each unit's perturbed inputs are scored for
    logits: torch.Tensor  # the first method's (N, classes) scores (a detector's: its (N, K) detections' scores)


@dataclass(frozen=True)
class Described:
    """What a unit's records say of it, beside the measures."""

    class_index: int
    class_name: str | None
    probability: float | None  # a class's probability; a detection's score; None: a similarity (its score)
    score: float  # the model's raw score (a class's logit; a detection's score)
    topk: list[dict[str, Any]]
    detection: int | None = None  # its rank among the image's kept detections
    box: list[float] | None = None  # in the photo's pixels
    drawn: DrawnBox | None = None  # drawn on its overlay
    segment: int | None = None  # a segmenter's: its rank among the image's regions
    region: str | None = None  # a segmenter's: what the region is (predicted, box, mask, truth)
    outline: Any = None  # a segmenter's: outputs.outlines.DrawnRegion, drawn on its overlay
    named_class: bool = False  # an image has a unit per class (each prompt): its overlay is named by it, as explain's


PhotoMap = Callable[[Decoded, torch.Tensor], np.ndarray]  # a map at the input size, put back on the photo
OwnMeasures = dict[str, dict[str, list[Any]]]  # per map set, per measure, a value per unit


def own_place_metrics(asked: Sequence[Metric], defaulted: bool, boxes: Path | None, refusal: str) -> tuple[Metric, ...]:
    """The metrics of a task whose maps are measured in each unit's own place (a detection's box, a segmenter's region):
    ⟨boxes⟩ refused in one line (`refusal`), energy and the pointing game run by default."""
    if boxes is not None:
        raise UsageError(refusal)
    chosen = set(asked) | ({Metric.energy, Metric.pointing} if defaulted else set())
    return tuple(metric for metric in Metric if metric in chosen)
