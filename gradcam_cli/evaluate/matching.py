"""A detector's boxes matched to an image's true boxes, by the greedy rule COCO's evaluation uses.

pycocotools' `COCOeval.evaluateImg`, per class: the detections in order of
falling score (a stable sort: of equal scores the earlier first), each taking
the true box of its class that no earlier detection took and that overlaps it
most, if that overlap (IoU) is at least the threshold. A detection that takes
one is a true positive; one that takes none a false positive (a duplicate of
an object already found, a box in the wrong place, a class the image lacks);
a true box none takes is a missed object. Two details follow pycocotools to
the letter, so counts agree with it: an IoU equal to the threshold matches
(the threshold is capped at 1 - 1e-10, so 1.0 means "the very box"), and of
true boxes with equal IoU the later one is taken. A true box whose class the
model lacks (label -1) is never taken: always missed.

No crowd regions, area ranges or per-image detection cap here: the truth
readers leave crowds out, and every detection counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

IOU_CAP = 1 - 1e-10  # pycocotools' `min([t, 1 - 1e-10])`: float IoU of a box with itself may fall a hair short of 1


@dataclass(frozen=True)
class Matching:
    """Which true box each detection took, how much it overlapped, and the true boxes none took."""

    match: list[int | None]  # per detection: the index of the true box it took (a true positive), None (a false positive)
    iou: list[float]  # per detection: IoU with the box it took, else with the best box of its class (taken or not), else 0.0
    missed: list[int]  # the true boxes no detection took (false negatives), in order

    @property
    def tp(self) -> int:
        return sum(found is not None for found in self.match)

    @property
    def fp(self) -> int:
        return len(self.match) - self.tp

    @property
    def fn(self) -> int:
        return len(self.missed)


def _array(values: Any, columns: int | None, what: str) -> np.ndarray:
    """A float64 array of N rows (N×columns for boxes) from a list, a numpy array or a tensor on any device."""
    if hasattr(values, "detach"):
        values = values.detach().double().cpu().numpy()
    array = np.asarray(values, dtype=np.float64)
    if columns is not None:
        array = array.reshape(-1, columns) if array.size == 0 else array
        if array.ndim != 2 or array.shape[1] != columns:
            raise ValueError(f"{what}: expected shape (N, {columns}), got {array.shape}")
    elif array.ndim != 1:
        raise ValueError(f"{what}: expected shape (N,), got {array.shape}")
    return array


def box_iou(boxes: np.ndarray, others: np.ndarray) -> np.ndarray:
    """(K, T) IoU of x1,y1,x2,y2 boxes, as torchvision.ops.box_iou computes it (areas of edges, no +1); 0 for no union."""
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    other_area = (others[:, 2] - others[:, 0]) * (others[:, 3] - others[:, 1])
    width = np.clip(np.minimum(boxes[:, None, 2], others[None, :, 2]) - np.maximum(boxes[:, None, 0], others[None, :, 0]), 0, None)
    height = np.clip(np.minimum(boxes[:, None, 3], others[None, :, 3]) - np.maximum(boxes[:, None, 1], others[None, :, 1]), 0, None)
    inter = width * height
    union = area[:, None] + other_area[None, :] - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def match_detections(boxes: Any, labels: Any, scores: Any, true_boxes: Any, true_labels: Any, iou: float = 0.5) -> Matching:
    """Greedy COCO matching of K detections (boxes K×4 xyxy, labels, scores) to T true boxes (T×4, labels; -1: unknown)."""
    detected, true = _array(boxes, 4, "boxes"), _array(true_boxes, 4, "true_boxes")
    classes, true_classes = _array(labels, None, "labels"), _array(true_labels, None, "true_labels")
    confidence = _array(scores, None, "scores")
    if not len(detected) == len(classes) == len(confidence) or len(true) != len(true_classes):
        raise ValueError(
            f"{len(detected)} boxes, {len(classes)} labels, {len(confidence)} scores; {len(true)} true boxes, {len(true_classes)} labels"
        )
    overlaps = box_iou(detected, true)
    same = (classes[:, None] == true_classes[None, :]) & (true_classes[None, :] >= 0)
    threshold = min(float(iou), IOU_CAP)
    taken = [False] * len(true)
    match: list[int | None] = [None] * len(detected)
    ious = [0.0] * len(detected)
    for detection in np.argsort(-confidence, kind="stable"):
        best, chosen = threshold, None
        for index in np.flatnonzero(same[detection]):
            if not taken[index] and overlaps[detection, index] >= best:  # >=: an equal IoU later on wins, as pycocotools
                best, chosen = overlaps[detection, index], int(index)
        if chosen is not None:
            taken[chosen] = True
            match[detection] = chosen
        candidates = overlaps[detection][same[detection]]
        ious[detection] = float(overlaps[detection, chosen]) if chosen is not None else float(candidates.max(initial=0.0))
    return Matching(match, ious, [index for index, took in enumerate(taken) if not took])
