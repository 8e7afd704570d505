"""What a task found in an image, as results carry it to the writers: a detector's boxes (an instance segmenter's with
their masks) and their judgement, a segmenter's regions.

A leaf (torch only): the detector families (model/) read their outputs into
`Detections`, the detection targets (cams/) pick from them, the judge (run/)
matches them to the truth, and the writers (outputs/) draw them, all without
importing each other; a segmenter's targets (cams/segments.py) say its
`Segments` for its writer (outputs/segment_files.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Masks:
    """Each detection's mask, made only when asked for: (K, H, W) bool in the input's pixels, an instance's pixels True.

    A mask is an image's worth of pixels, and a family reads far more detections than are explained (Ultralytics'
    NMS keeps up to 300 an image, every perturbed forward of `gradcam eval` is read again): `make` turns the family's
    own indices into masks, and only the kept detections' are made, when the batch goes to the CPU for the writers.
    """

    make: Callable[[torch.Tensor], torch.Tensor]  # the family's detection indices (k,) → their masks (k, H, W) bool
    index: torch.Tensor  # (K,) which of the family's detections these are

    @staticmethod
    def of(pixels: torch.Tensor) -> Masks:
        """Masks already made, (K, H, W)."""
        return Masks(lambda index: pixels[index.to(pixels.device)], torch.arange(int(pixels.shape[0])))

    def take(self, index: torch.Tensor) -> Masks:
        return Masks(self.make, self.index[index.to(self.index.device)])

    def pixels(self) -> torch.Tensor:
        """The masks, made: (K, H, W) bool."""
        return self.make(self.index).bool()

    def cpu(self) -> Masks:
        """Made, on the CPU: the writer threads never call back into a family's tensors."""
        return Masks.of(self.pixels().cpu())


@dataclass(frozen=True)
class Detections:
    """One image's detections as the model scored them: boxes (K, 4) x1, y1, x2, y2 in the input's pixels,
    labels (K,) class indices, scores (K,), in the forward's graph until `cpu()`; an instance segmenter's masks too
    (Mask R-CNN, Ultralytics' Segment head), each detection's pixels of the input, None for a box-only detector."""

    boxes: torch.Tensor
    scores: torch.Tensor
    labels: torch.Tensor
    masks: Masks | None = None

    def __len__(self) -> int:
        return int(self.scores.shape[0])

    def cpu(self) -> Detections:
        """Detached on the CPU, the masks made, for the writer threads."""
        return Detections(
            self.boxes.detach().float().cpu(), self.scores.detach().float().cpu(), self.labels.detach().cpu(),
            None if self.masks is None else self.masks.cpu(),
        )  # fmt: skip

    def detached(self) -> Detections:
        """Out of the graph, where it is (what the engine keeps of a reading)."""
        return Detections(self.boxes.detach(), self.scores.detach(), self.labels.detach(), self.masks)

    def take(self, index: torch.Tensor) -> Detections:
        masks = None if self.masks is None else self.masks.take(index)
        return Detections(self.boxes[index], self.scores[index], self.labels[index], masks)


@dataclass(frozen=True)
class Candidate:
    """The candidate of a lost object's class that overlaps it best: its box (input pixels), score and IoU."""

    box: tuple[float, float, float, float]
    score: float
    iou: float


@dataclass(frozen=True)
class Missed:
    """A missed object's explanation: which true box, its best candidate (None: the model had none of its class),
    and its map at the input's size (None without a candidate)."""

    truth: int  # the true box's index in the image's truth
    candidate: Candidate | None
    cam: torch.Tensor | None
    blank: bool | None


@dataclass(frozen=True)
class Judged:
    """A detector's image judged against its truth: the kept detections, their match (tp or fp, IoU), the true boxes
    in the photo's pixels with their classes, and each missed object's explanation."""

    detections: Detections
    match: list[int | None]
    iou: list[float]
    truth: list[tuple[tuple[float, float, float, float], int | None, str]]  # box, class index (None: unknown), name
    missed: list[Missed]

    def cpu(self) -> Judged:
        return self


@dataclass(frozen=True)
class Segment:
    """One region a segmenter's map explains: the class whose score is summed over it, and where it came from."""

    class_index: int
    kind: str  # predicted (where the model says the class), box (⟨region⟩), mask (⟨mask⟩), truth, or missed
    region: torch.Tensor  # (H, W) bool in the input's pixels; a 3-D segmenter's (D, H, W) in its voxels
    score: float  # the class's score summed over the region: what the map explains
    mean_probability: float  # the class's mean probability over the region


@dataclass(frozen=True)
class Segments:
    """One image's explained regions (rank k is `segments[k]`), the class the model gives each input pixel (-1: none,
    a binary segmenter's background), and the image's true mask in the photo's pixels (-1 ignored) when given."""

    segments: list[Segment]
    labels: torch.Tensor  # (H, W) int in the input's pixels; a 3-D segmenter's (D, H, W)
    truth: Any = None  # numpy (h, w) int in the photo's pixels, or None

    def __len__(self) -> int:
        return len(self.segments)

    def cpu(self) -> Segments:
        """On the CPU, for the writer threads."""
        moved = [Segment(s.class_index, s.kind, s.region.cpu(), s.score, s.mean_probability) for s in self.segments]
        return Segments(moved, self.labels.cpu(), self.truth)
