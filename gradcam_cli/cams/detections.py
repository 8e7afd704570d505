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

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from gradcam_cli.cams.targets import Reading
from gradcam_cli.found import Candidate, Detections
from gradcam_cli.model.detectors import DetectorFamily

DEFAULT_SCORE_THRESHOLD = 0.5
DEFAULT_MAX_DETECTIONS = 20
MIN_IOU = 0.5  # pytorch-grad-cam's FasterRCNNBoxScoreTarget iou_threshold: a detection found again in a changed image
ScoreReader = Callable[[Any, torch.Tensor], torch.Tensor]  # (a forward's result, the image of each row) → each row's score


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

    # each rank's backward is cheap on its own (a detector family's `explaining`), and a batched one (vmap) would
    # run a custom backward such as the sparse RoIAlign's rank by rank anyway: one backward per rank
    batched = False

    def forwarding(self, model: nn.Module) -> contextlib.AbstractContextManager[object]:
        return self.family.explaining(model)

    def for_images(self, images: Sequence[Any]) -> DetectionTargets:
        return self  # a detector's truth is judged after its maps (run/judge.py)

    def perturbed(
        self, reading: Reading, rank: int, model: nn.Module
    ) -> tuple[ScoreReader | None, contextlib.AbstractContextManager[object]]:
        """How a masked forward (scorecam, ablationcam) scores rank `rank`: each image's detection found again in it
        (`matched_score`), the model's postprocessing opened so a weakened one still has its candidate."""
        sought = [(mine.boxes[rank], int(mine.labels[rank])) if rank < len(mine) else None for mine in reading.found or []]
        return found_again(self.family, self.input_hw, sought), self.family.every_candidate(model)

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
            found=[f.detached() for f in per_image],
        )


@dataclass(frozen=True)
class Lost:
    """A true object no kept detection matched: its box in the input's pixels and its class among the model's."""

    box: tuple[float, float, float, float]
    class_index: int


@dataclass(frozen=True)
class MissedTargets:
    """The missed objects of a batch's images: each one's target is the score for its true class of the candidate
    that overlaps it best, among every candidate the model scored (its postprocessing opened: no threshold, no NMS).

    IoU is taken in the photo's pixels (`scales`: per image, the input pixel's width and height there), as the
    matching is, so a stretched input (SSD) chooses the same candidate the photo would.

    `gradcam eval` reads its kept detections again by the same rule (run/evaluation_units.py): in the trained model
    each finds its own candidate (IoU 1), in the sanity check's randomised copies whatever they score there.
    """

    family: DetectorFamily
    lost: tuple[tuple[Lost, ...], ...]  # per image of the batch
    scales: tuple[tuple[float, float], ...]  # per image: (x, y) size of an input pixel in the photo
    input_hw: tuple[int, int] = (0, 0)  # the model input's size (DetectionTargets.input_hw)

    @property
    def count(self) -> int:
        return max((len(lost) for lost in self.lost), default=0)

    batched = False  # as DetectionTargets

    def for_images(self, images: Sequence[Any]) -> MissedTargets:
        return self

    def forwarding(self, model: nn.Module) -> contextlib.AbstractContextManager[object]:
        stack = contextlib.ExitStack()
        stack.enter_context(self.family.every_candidate(model))
        stack.enter_context(self.family.explaining(model))
        return stack

    def perturbed(
        self, reading: Reading, rank: int, model: nn.Module
    ) -> tuple[ScoreReader | None, contextlib.AbstractContextManager[object]]:
        """A masked forward scores a lost object's candidate as a detection's is scored (DetectionTargets.perturbed)."""
        sought = []
        for candidates, lost in zip(reading.found or [], self.lost):
            candidate = candidates[rank] if rank < len(candidates) else None
            sought.append(None if candidate is None else (torch.tensor(candidate.box), lost[rank].class_index))
        return found_again(self.family, self.input_hw, sought), self.forwarding(model)

    def read(self, output: Any, model_name: str = "the model") -> Reading:
        """Per image, per lost object: its best candidate's score for its class (K ranks, unchosen where none)."""
        per_image = self.family.read(output, model_name, self.input_hw)
        rows, classes, found = [], [], []
        for candidates, lost, scale in zip(per_image, self.lost, self.scales):
            picked = [_best(candidates, one, scale) for one in lost]
            rows.append([score for score, _ in picked])
            classes.append([one.class_index for one in lost])
            found.append([candidate for _, candidate in picked])
        return _ranked(rows, classes, found, per_image)


def _best(candidates: Detections, lost: Lost, scale: tuple[float, float]) -> tuple[torch.Tensor | None, Candidate | None]:
    """The lost object's best-overlapping candidate of its class, and its score in the graph (None: no candidate)."""
    from torchvision.ops import box_iou

    mine = (candidates.labels == lost.class_index).nonzero().flatten()
    if not len(mine):
        return None, None
    stretch = candidates.boxes.new_tensor([scale[0], scale[1]] * 2)
    true = candidates.boxes.new_tensor([lost.box]) * stretch
    ious = box_iou(true, candidates.boxes.detach()[mine].float() * stretch)[0]
    best = int(ious.argmax())
    index = int(mine[best])
    box = tuple(float(v) for v in candidates.boxes[index].detach())
    return candidates.scores[index], Candidate(box, float(candidates.scores[index].detach()), float(ious[best]))  # type: ignore[arg-type]


def _ranked(
    rows: list[list[torch.Tensor | None]], classes: list[list[int]], found: list[list[Any]], per_image: list[Detections]
) -> Reading:
    """Per-image scores (some missing) as a (N, K) reading: a missing one is a constant zero, its rank unchosen."""
    n = len(rows)
    device = per_image[0].scores.device if per_image else torch.device("cpu")
    ranks = max((len(row) for row in rows), default=0) if any(s is not None for row in rows for s in row) else 0
    zero = torch.zeros((), device=device)
    chosen = torch.tensor([[k < len(row) and row[k] is not None for k in range(ranks)] for row in rows], dtype=torch.bool)
    targets = torch.tensor([[row[k] if k < len(row) else 0 for k in range(ranks)] for row in classes], dtype=torch.long)
    if not ranks:
        stacked = torch.zeros((n, 0), device=device)
    else:
        stacked = torch.stack([torch.stack([row[k] if chosen[i, k] else zero for k in range(ranks)]) for i, row in enumerate(rows)])  # type: ignore[misc]
    return Reading(
        scores=stacked, targets=targets.reshape(n, ranks), logits=stacked.detach(), chosen=chosen.reshape(n, ranks).to(device),
        found=found,
    )  # fmt: skip


def found_again(family: DetectorFamily, input_hw: tuple[int, int], sought: list[tuple[torch.Tensor, int] | None]) -> ScoreReader:
    """A masked forward's score for each row: its image's sought object (a box in the input's pixels and a class)
    found again among that forward's detections (`matched_score`); 0 for an image that has none at this rank."""

    def scores(output: Any, images: torch.Tensor) -> torch.Tensor:
        per_image = family.read(output, "the model", input_hw)
        out = []
        for row, image in enumerate(images.tolist()):
            wanted = sought[image]
            out.append(torch.zeros(()) if wanted is None else matched_score(per_image[row], wanted[0], wanted[1]))
        return torch.stack([value.float().cpu() for value in out]).to(images.device)

    return scores


def matched_score(found: Detections, box: torch.Tensor, label: int, min_iou: float = MIN_IOU) -> torch.Tensor:
    """A detection's score among `found` (one image's output boxes): the score of the box of class `label` that
    overlaps `box` (4,) best, or 0 when none of that class overlaps it by at least `min_iou`."""
    from torchvision.ops import box_iou

    zero = found.scores.new_zeros((), dtype=torch.float32)
    mine = (found.labels == label).nonzero().flatten()
    if not len(mine):
        return zero
    ious = box_iou(box.to(found.boxes.device, torch.float32)[None], found.boxes[mine].float())[0]
    best = int(ious.argmax())
    return found.scores[mine[best]].float() if float(ious[best]) >= min_iou else zero
