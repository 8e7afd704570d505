"""A detector's maps scored: each kept detection's own score, read again in every perturbed image.

Deletion, insertion, drop and increase, and ROAD (evaluate/faithfulness.py,
evaluate/road.py) perturb an image by a map and ask the model again. A
classifier's answer is its class's probability; a detector's is a new set of
boxes, so each detection's score in a perturbed image is read by one rule:

    the score of the output box of the detection's class that overlaps the
    detection's own box best (IoU, torchvision.ops.box_iou, in the model
    input's pixels), or 0 when no box of its class overlaps it by at least 0.5.

This is pytorch-grad-cam's `FasterRCNNBoxScoreTarget` matching rule without
its IoU term: that target adds the best box's IoU to its score, and here the
score alone is what the curves follow. Two details differ from it, on purpose:
the best box is sought among the boxes of the detection's class (it takes the
best box of any class and scores 0 when that box's class differs; with every
candidate kept, FCOS's candidates of all classes at a location share one box,
and a tie of IoU would let a candidate of another class win), and an IoU of
exactly 0.5 counts (it asks for more than 0.5).

While perturbed images are scored the model's postprocessing is opened (the
family's `every_candidate`: no score threshold, no suppression, no cap), so a
weakened object still has its candidate to read, however low its score falls,
instead of dropping under the threshold to a 0 that says nothing of how far.
In the unperturbed image the detection's own candidate is read: its box at IoU 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from gradcam_cli.cams.detections import MIN_IOU, matched_score
from gradcam_cli.model.detectors import DetectorFamily


@dataclass(frozen=True)
class DetectionScores:
    """A detector's scorer (faithfulness.Scorer): unit u is one kept detection, its box (U, 4) in the input's pixels
    and its class; each perturbed input is scored by `matched_score`, the postprocessing opened."""

    family: DetectorFamily
    boxes: torch.Tensor  # (U, 4) x1, y1, x2, y2 in the model input's pixels
    labels: torch.Tensor  # (U,) class indices
    input_hw: tuple[int, int]
    model_name: str = "the model"
    min_iou: float = MIN_IOU

    @property
    def count(self) -> int:
        return len(self.labels)

    def __call__(self, model: nn.Module, inputs: torch.Tensor, units: torch.Tensor) -> torch.Tensor:
        """(B,) the score of detection `units[b]` in `inputs[b]`, on the model's device."""
        with self.family.every_candidate(model):
            output = model(inputs)
        found = self.family.read(output, self.model_name, self.input_hw)
        scores = [matched_score(image, self.boxes[u], int(self.labels[u]), self.min_iou) for image, u in zip(found, units.tolist())]
        return torch.stack(scores) if scores else torch.zeros(0, device=inputs.device)
