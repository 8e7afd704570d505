"""What a detector family reads from a forward: one image's boxes, classes and scores.

Its own module so that each family's module (model/detectors.py, model/hf_detectors.py) can build them without
importing the registry of families that imports it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Detections:
    """One image's detections as the model scored them: boxes (K, 4) x1, y1, x2, y2 in the input's pixels,
    labels (K,) class indices, scores (K,), in the forward's graph until `cpu()`."""

    boxes: torch.Tensor
    scores: torch.Tensor
    labels: torch.Tensor

    def __len__(self) -> int:
        return int(self.scores.shape[0])

    def cpu(self) -> Detections:
        """Detached on the CPU, for the writer threads."""
        return Detections(self.boxes.detach().float().cpu(), self.scores.detach().float().cpu(), self.labels.detach().cpu())

    def take(self, index: torch.Tensor) -> Detections:
        return Detections(self.boxes[index], self.scores[index], self.labels[index])
