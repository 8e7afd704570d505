"""How a segmentation model's predicted classes overlap the truth's, per class: IoU, Dice and the areas behind them.

Counted as mmsegmentation's `intersect_and_union` and torchmetrics' Jaccard
index count them: pixels the truth ignores (label -1: void, unlabelled) are
left out of both the truth's and the prediction's areas, so a prediction on
VOC's void borders costs nothing. Where a class is in neither the truth nor
the prediction of an image, IoU and Dice are None, not 0 and not 1 (mmseg's
NaN): nothing was there to find and nothing was claimed, and a mean over
images leaves that image out for that class rather than reward or punish it.

Torch-free: label maps are numpy arrays of class indices, at one size.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

IGNORED = -1  # a truth pixel that counts for no class: inputs/segmentation_truth.py's IGNORED (a layer above, so not imported)


@dataclass(frozen=True)
class Overlap:
    """One class in one image: IoU and Dice (None where neither the truth nor the prediction has it), and the
    pixel areas behind them, the ignored pixels left out."""

    iou: float | None  # |T ∩ P| / |T ∪ P|
    dice: float | None  # 2 |T ∩ P| / (|T| + |P|)
    true_area: int  # |T|: pixels the truth says are the class
    predicted_area: int  # |P|: pixels the prediction says are the class, where the truth is not ignored
    missed_area: int  # |T \ P|: pixels the truth says are the class and the prediction says are another


def class_overlap(predicted: np.ndarray, truth: np.ndarray, classes: Iterable[int]) -> dict[int, Overlap]:
    """Each class's overlap of an image's predicted label map with its true one (both (H, W) class indices)."""
    predicted, truth = np.asarray(predicted), np.asarray(truth)
    if predicted.shape != truth.shape:
        raise ValueError(f"the prediction is {predicted.shape} and the truth {truth.shape}; compare label maps of one size")
    wanted = list(dict.fromkeys(int(index) for index in classes))
    if any(index < 0 for index in wanted):
        raise ValueError(f"class indices are 0 or more, not {min(wanted)}")
    if not wanted:
        return {}
    counted = truth != IGNORED
    true, said = truth[counted].astype(np.int64), predicted[counted].astype(np.int64)
    size = max(wanted) + 1

    def areas(labels: np.ndarray) -> np.ndarray:
        """Pixels per class 0..size-1; labels outside that range (other classes, a negative "none") belong to none."""
        inside = labels[(labels >= 0) & (labels < size)]
        return np.bincount(inside, minlength=size)

    true_areas, predicted_areas, shared = areas(true), areas(said), areas(true[true == said])
    overlaps = {}
    for index in wanted:
        t, p, both = int(true_areas[index]), int(predicted_areas[index]), int(shared[index])
        union = t + p - both
        iou = both / union if union else None
        dice = 2 * both / (t + p) if t + p else None
        overlaps[index] = Overlap(iou, dice, t, p, t - both)
    return overlaps


def missed_region(predicted: np.ndarray, truth: np.ndarray, index: int) -> np.ndarray:
    """(H, W) bool: where the truth says the class is and the prediction says another: what the model missed of it."""
    predicted, truth = np.asarray(predicted), np.asarray(truth)
    if predicted.shape != truth.shape:
        raise ValueError(f"the prediction is {predicted.shape} and the truth {truth.shape}; compare label maps of one size")
    if index < 0:
        raise ValueError(f"class indices are 0 or more, not {index}")
    return (truth == index) & (predicted != index)
