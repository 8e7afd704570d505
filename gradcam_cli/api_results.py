"""What `explain()` returns: one ClassMap per explained class and the Explanation of the image, arrays read-only."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from gradcam_cli.geometry import Geometry
from gradcam_cli.outputs.records import DetectionRecord, ImageRecord, MissedRecord, SegmentRecord, TargetRecord

if TYPE_CHECKING:
    from PIL import Image


@dataclass(frozen=True, eq=False)
class ClassMap:
    """One explained class (or prompt, or references): its map and overlay at the photo's resolution, its part of the record."""

    class_index: int
    class_name: str | None
    probability: float | None  # as in the record: softmax, a sigmoid (binary, multilabel), None (a regression)
    score: float  # the logit
    blank: bool  # nothing survived the ReLU, or the map is flat: try another layer or class
    map: np.ndarray = field(repr=False)  # float32 (H, W) in [0, 1]: what the overlay shows
    raw: np.ndarray = field(repr=False)  # what `--save-raw` writes: `map`, or with norm="none" the raw values
    overlay: Image.Image = field(repr=False)  # the heat map blended over the photo (RGB)
    guided: Image.Image | None = field(repr=False)  # method="guided-gradcam": the guided Grad-CAM image (RGB)
    record: TargetRecord = field(repr=False)  # the CLI record's target, without file paths (nothing was written)
    prompt: str | None = None  # a CLIP-style model's map: the text whose similarity to the image it explains
    similarity: float | None = None  # a prompt's or the references' map: that similarity (the score), else None


@dataclass(frozen=True, eq=False)
class ObjectMap:
    """A detector's object: a kept detection (or, with truth, a missed one), its map and its own overlay."""

    box: tuple[float, float, float, float]  # x1, y1, x2, y2 in the photo's pixels (a missed object: its true box)
    class_index: int | None
    class_name: str | None
    score: float | None  # the detector's score (a missed object: its best candidate's)
    map: np.ndarray | None = field(repr=False)  # float32 (H, W) in [0, 1] (None: a missed object without a candidate)
    overlay: Image.Image | None = field(repr=False)  # its whole map, only its box drawn
    record: DetectionRecord | MissedRecord = field(repr=False)  # the CLI record's entry, without file paths
    mask: np.ndarray | None = field(default=None, repr=False)  # an instance segmenter's detection: bool (H, W) on the photo


@dataclass(frozen=True, eq=False)
class RegionMap:
    """A segmenter's region: its class, its pixels on the photo, its map and its own overlay (only its outline)."""

    class_index: int
    class_name: str | None
    kind: str  # predicted, box, mask, truth, or missed (the truth says the class, the model another)
    region: np.ndarray = field(repr=False)  # bool (H, W) on the photo
    map: np.ndarray = field(repr=False)  # float32 (H, W) in [0, 1]
    overlay: Image.Image | None = field(repr=False)
    record: SegmentRecord = field(repr=False)  # the CLI record's entry, without file paths


@dataclass(frozen=True, eq=False)
class Explanation:
    """What explain() found for one image: one ClassMap per explained class, in order, and the record.

    `map`, `overlay`, `class_index`, `class_name` and `probability` are the first class's, like the record's
    top-level fields. A detector's explanation has `detections` (and with truth `missed`) instead of `targets`,
    its `overlay` the picture of every box; a segmenter's has `segments`, its `overlay` the picture of every region.
    Arrays are read-only.
    """

    targets: tuple[ClassMap, ...]
    record: ImageRecord = field(repr=False)  # what `gradcam explain --json` prints for the image, less file paths
    image: np.ndarray = field(repr=False)  # the photo as decoded: (H, W, 3) uint8, upright
    geometry: Geometry = field(repr=False)  # where the model's input lay on the photo
    detections: tuple[ObjectMap, ...] | None = None  # a detector's kept detections, highest score first
    missed: tuple[ObjectMap, ...] | None = None  # with truth, the objects it missed
    picture: Image.Image | None = field(default=None, repr=False)  # a detector's or segmenter's: every object over its map
    segments: tuple[RegionMap, ...] | None = None  # a segmenter's explained regions (with truth, the missed ones too)

    map = property(lambda self: self._first("map"))
    overlay = property(lambda self: self.picture if self.picture is not None else self._first("overlay"))
    class_index = property(lambda self: self._first("class_index"))
    class_name = property(lambda self: self._first("class_name"))
    probability = property(lambda self: self._first("probability"))

    def _first(self, name: str) -> Any:
        """The first class's field; None when nothing was explained (multilabel=True, no label above the threshold)."""
        return getattr(self.targets[0], name) if self.targets else None

    def _repr_png_(self) -> bytes | None:
        """A notebook shows the first overlay."""
        shown = self.overlay
        return shown._repr_png_() if shown is not None else None
