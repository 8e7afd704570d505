"""A detector's targets: each kept detection's own class score, one rank per detection.

The model's family (model/detectors.py) reads its output as one `Detections`
per image, each score taken where the model produced it (the candidate box,
anchor or query that survived non-maximum suppression), still in the graph.
Kept: scores at least ⟨score_threshold⟩, the classes asked for, at most
⟨max_detections⟩ per image, highest first. Rank k of image n is its k-th kept
detection; images with fewer have the rest of their ranks unchosen, so one
forward and one batched backward give every detection of the batch its map.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from gradcam_cli.cams.targets import Reading
from gradcam_cli.model.detectors import DetectorFamily, Detections

DEFAULT_SCORE_THRESHOLD = 0.5
DEFAULT_MAX_DETECTIONS = 20


@dataclass(frozen=True)
class DetectionTargets:
    """Which detections each image's maps explain."""

    family: DetectorFamily
    score_threshold: float = DEFAULT_SCORE_THRESHOLD
    max_detections: int = DEFAULT_MAX_DETECTIONS
    classes: tuple[int, ...] = ()  # ⟨classes⟩: only these; empty: every class
    input_hw: tuple[int, int] = (0, 0)  # the model input's size: where boxes relative to it (transformers') get their pixels

    @property
    def count(self) -> int:
        """The most ranks an image can have."""
        return self.max_detections

    def kept(self, found: Detections) -> Detections:
        """One image's detections that are explained, highest score first."""
        keep = found.scores.detach() >= self.score_threshold
        if self.classes:
            keep &= torch.isin(found.labels, torch.tensor(self.classes, device=found.labels.device))
        index = keep.nonzero().flatten()
        order = found.scores.detach()[index].argsort(descending=True, stable=True)[: self.max_detections]
        return found.take(index[order])

    def read(self, output: Any, model_name: str = "the model") -> Reading:
        """Each image's kept detections as ranks: their scores (N, K), labels, and which ranks each image has."""
        per_image = [self.kept(found) for found in self.family.read(output, model_name, self.input_hw)]
        ranks = max((len(found) for found in per_image), default=0)
        rows, labels = [], []
        for found in per_image:
            missing = ranks - len(found)
            rows.append(torch.cat([found.scores, found.scores.new_zeros(missing)]))
            labels.append(torch.cat([found.labels.long(), found.labels.new_zeros(missing, dtype=torch.long)]))
        n = len(per_image)
        device = rows[0].device if rows else torch.device("cpu")
        scores = torch.stack(rows) if rows else torch.zeros((n, 0), device=device)
        counts = torch.tensor([len(found) for found in per_image], device=device)
        chosen = torch.arange(ranks, device=device)[None, :] < counts[:, None]
        return Reading(
            scores=scores,
            targets=torch.stack(labels) if labels else torch.zeros((n, 0), dtype=torch.long),
            logits=scores.detach(),
            chosen=chosen,
            found=[Detections(f.boxes.detach(), f.scores.detach(), f.labels.detach()) for f in per_image],
        )
