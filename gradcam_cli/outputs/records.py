"""The JSON record written for every input, and for each class explained in it.

Records are frozen dataclasses with `to_json()`: one line per image on
stdout, with the settings needed to reproduce the run. Every string is made
valid UTF-8 on the way in, so a file name with stray bytes still gives a line
any JSON reader accepts.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any


def utf8(text: str) -> str:
    """A file-system string as valid UTF-8: bytes of a name that were not UTF-8 become `\\xNN`.

    Python keeps such bytes as lone surrogates (surrogateescape); written as
    they are, they make a stdout line that no JSON reader accepts.
    """
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def class_name(names: Sequence[str] | None, index: int | None) -> str | None:
    """A class's name, when the model has names and the index is one of them (None: no class)."""
    return names[index] if names and index is not None and 0 <= index < len(names) else None


def _utf8_fields(record: Any, names: tuple[str, ...]) -> None:
    for name in names:
        value = getattr(record, name)
        if isinstance(value, str):
            object.__setattr__(record, name, utf8(value))
        elif isinstance(value, list):
            object.__setattr__(record, name, [utf8(v) if isinstance(v, str) else v for v in value])


@dataclass(frozen=True)
class TargetRecord:
    class_index: int
    class_name: str | None
    score: float
    probability: float | None  # None for a regression output's value
    blank: bool
    overlay: str | None = None
    raw: str | None = None
    guided: str | None = None

    def __post_init__(self) -> None:
        _utf8_fields(self, ("class_name", "overlay", "raw", "guided"))


@dataclass(frozen=True)
class DetectionRecord:
    """One kept detection of a detector's image and its map: where, what, how sure, and where its map lies."""

    rank: int  # its place among the image's kept detections, highest score first (the `.detN` of its overlay)
    box: list[float]  # x1, y1, x2, y2 in the photo's pixels
    class_index: int
    class_name: str | None
    score: float  # the detector's own score for it, the target its map explains
    blank: bool
    energy_in_box: float | None = None  # the share of its map's energy inside its box (None: a blank map)
    peak_in_box: bool | None = None  # whether its map's peak falls in its box (the pointing game)
    overlay: str | None = None  # ⟨each⟩: its own picture
    match: str | None = None  # with ⟨truth⟩: "tp" (it matches a true box of its class at ⟨iou⟩) or "fp"; None: no truth
    iou: float | None = None  # with ⟨truth⟩: its IoU with the true box it matched, else with the best true box of its class
    mask_area: int | None = None  # an instance segmenter's: its mask's pixels on the photo (None: a box-only detector)
    energy_in_mask: float | None = None  # the share of its map's energy inside its mask (None: box-only, a blank map, no pixel)

    def __post_init__(self) -> None:
        _utf8_fields(self, ("class_name", "overlay"))


@dataclass(frozen=True)
class MissedRecord:
    """A true object no kept detection matched (a false negative), and what the model saw there instead.

    Its map explains the score for the true class of the candidate (box, anchor or query) that overlaps the true box
    best, before the score threshold and non-maximum suppression.
    """

    rank: int  # its place among the image's missed objects (the `.missN` of its overlay)
    box: list[float]  # the true box, x1, y1, x2, y2 in the photo's pixels
    class_index: int | None  # the true class among the model's classes (None: the model lacks it; no map)
    class_name: str | None
    candidate_box: list[float] | None = None  # the best-overlapping candidate of the true class (None: the model had none)
    candidate_score: float | None = None  # its score for the true class: how far below ⟨score_threshold⟩ it stayed
    candidate_iou: float | None = None  # its IoU with the true box
    blank: bool | None = None
    energy_in_box: float | None = None  # the share of its map's energy inside the true box
    peak_in_box: bool | None = None
    overlay: str | None = None  # ⟨each⟩: its own picture

    def __post_init__(self) -> None:
        _utf8_fields(self, ("class_name", "overlay"))


@dataclass(frozen=True)
class SegmentRecord:
    """One explained region of a segmenter's image and its map: which class, where, how sure, and where its map lies."""

    rank: int  # its place among the image's regions (the `.segN` of its overlay; a missed region's `.missN`)
    class_index: int
    class_name: str | None
    region: str  # predicted (where the model says the class), box, mask, truth, or missed (truth says it, the model not)
    area: int  # the region's pixels on the photo
    area_fraction: float  # its share of the photo
    score: float  # the class's score summed over the region: what the map explains
    mean_probability: float  # the class's mean probability in the region
    blank: bool
    energy_in_region: float | None = None  # the share of its map's energy inside its region (None: a blank map)
    iou: float | None = None  # with ⟨truth⟩: the class's IoU, prediction against truth, over the photo
    dice: float | None = None
    missed_area: int | None = None  # with ⟨truth⟩: the pixels truth gives the class and the model another
    overlay: str | None = None  # ⟨each⟩: its own picture

    def __post_init__(self) -> None:
        _utf8_fields(self, ("class_name", "overlay"))


@dataclass(frozen=True)
class OverlapRecord:
    """With ⟨truth⟩, one class of a segmenter's image: its prediction against its true mask, over the photo."""

    class_index: int
    class_name: str | None
    iou: float | None  # None: neither the truth nor the model gives the class a pixel
    dice: float | None
    true_area: int
    predicted_area: int
    missed_area: int

    def __post_init__(self) -> None:
        _utf8_fields(self, ("class_name",))


@dataclass(frozen=True)
class ImageRecord:
    input: str
    ok: bool
    error: str | None = None
    model: str | None = None
    source: str | None = None  # the hub that built the model: timm, torchvision, or code (the user's own)
    output: str | None = None  # where in the forward's result the class scores were (None: the result is them)
    target: str | None = None  # what the maps explain: class, binary, multilabel or regression (vocab.TargetKind); ", negative"
    layers: list[str] = field(default_factory=list)
    method: str | None = None
    device: str | None = None
    width: int | None = None
    height: int | None = None
    frame: int | None = None  # a video's: the frame's index among all its frames (None: an image)
    time: float | None = None  # a video's: the frame's time in seconds from the video's start
    clip: int | None = None  # a video classifier's: the clip (of ⟨clip_len⟩ frames) this frame's map and class come from
    slice: int | None = None  # a volume's: the slice's index in its plane's stack (⟨slices⟩), upright as viewers show it
    intensity: str | None = None  # a volume's: how its intensities were scaled for the model (a window, or percentiles)
    class_index: int | None = None
    class_name: str | None = None
    score: float | None = None
    probability: float | None = None
    blank: bool | None = None
    true_class: str | None = None  # ground truth (the folder layout or --truth), when known
    true_index: int | None = None  # its index among the model's classes, when the model has it
    correct: bool | None = None  # the model's top class is the true one; None when the truth is not known
    skipped: bool = False  # --skip-existing: its outputs were there already, nothing was computed
    outputs: list[str] = field(default_factory=list)
    targets: list[TargetRecord] = field(default_factory=list)
    topk: list[dict[str, Any]] = field(default_factory=list)
    detections: list[DetectionRecord] | None = None  # a detector's kept detections, each with its map (None: a classifier)
    missed: list[MissedRecord] | None = None  # with ⟨truth⟩, a detector's missed true objects, each with its map
    segments: list[SegmentRecord] | None = None  # a segmenter's explained regions, each with its map (None: another task)
    overlap: list[OverlapRecord] | None = None  # with ⟨truth⟩, a segmenter's classes against their true masks
    prompts: list[str] | None = None  # the texts a CLIP-style model scored the image against (a zero-shot label's prompt)
    references: list[str] | None = None  # an embedding model's reference images the similarity is to (None: another target)
    settings: dict[str, Any] = field(default_factory=dict)
    stamp: str | None = None  # the hash of what made the pictures, which each carries (outputs/provenance.py)

    def __post_init__(self) -> None:
        _utf8_fields(self, ("input", "error", "model", "class_name", "true_class", "outputs", "layers"))

    def with_truth(self, name: str, index: int | None) -> ImageRecord:
        """This record, told the input's true class: right when the model's top class is it (a failed or
        skipped image is neither right nor wrong)."""
        top = self.topk[0]["index"] if self.topk else None
        correct = (top == index) if self.ok and top is not None else None
        return replace(self, true_class=name, true_index=index, correct=correct)

    def told_intensity(self, statement: str) -> ImageRecord:
        """This record, told how its volume's intensities were scaled (a slice's)."""
        return replace(self, intensity=statement)

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> ImageRecord:
        """A record as to_json() wrote it (a Ray actor's, read back by the driver)."""
        data = json.loads(text)
        detections, missed = data.get("detections"), data.get("missed")
        segments, overlap = data.get("segments"), data.get("overlap")
        return cls(**{
            **data,
            "targets": [TargetRecord(**target) for target in data.get("targets", [])],
            "detections": None if detections is None else [DetectionRecord(**found) for found in detections],
            "missed": None if missed is None else [MissedRecord(**lost) for lost in missed],
            "segments": None if segments is None else [SegmentRecord(**region) for region in segments],
            "overlap": None if overlap is None else [OverlapRecord(**one) for one in overlap],
        })  # fmt: skip

    def blank_targets(self) -> list[TargetRecord]:
        return [target for target in self.targets if target.blank]

    def remarks(self) -> list[str]:
        """What a person should hear about this image, one line each: why it failed, which maps are blank."""
        if not self.ok:
            return [self.error or f"{self.input}: failed"]
        if self.detections is not None:
            return [
                f"{self.input}: the map of detection {d.rank} ({d.class_name or f'class {d.class_index}'}, score {d.score:.2f}) is "
                f"blank (no positive evidence at {', '.join(self.layers)}); try another ⟨layers⟩"
                for d in self.detections
                if d.blank
            ]
        if self.segments is not None:
            return [
                f"{self.input}: the map of region {s.rank} ({s.class_name or f'class {s.class_index}'}, {s.region}) is "
                f"blank (no positive evidence at {', '.join(self.layers)}); try another ⟨layers⟩"
                for s in self.segments
                if s.blank
            ]
        return [
            f"{self.input}: the map for class {t.class_index}{f' ({t.class_name})' if t.class_name else ''} is blank "
            f"(no positive evidence at {', '.join(self.layers)}); try another ⟨layers⟩ or ⟨classes⟩"
            for t in self.blank_targets()
        ]


@dataclass(frozen=True)
class EvalRecord:
    """`gradcam eval`'s record of one unit and one map set (a method's maps or a baseline's), or of a failed image.

    A unit is a classifier's image (its class), or one kept detection of a
    detector's image (`detection` its rank, `box` in the photo's pixels, its
    class, `probability` its score); a detector's image with no detection kept
    is one ok record of no map set. It carries explain's fields (input, model,
    method, class, `targets` with the overlay when one was written), so
    `gradcam report` reads it as it reads explain's, its `metrics` sortable on
    the page.
    """

    input: str
    ok: bool
    error: str | None = None
    model: str | None = None
    method: str | None = None  # None: the image failed before any map
    baseline: bool = False  # a map that knows nothing of the model (random, centre, edges)
    layers: list[str] = field(default_factory=list)
    width: int | None = None
    height: int | None = None
    detection: int | None = None  # a detector's: the detection's rank among its image's kept ones (None: a classifier's)
    box: list[float] | None = None  # a detector's: the detection's box, x1, y1, x2, y2 in the photo's pixels
    segment: int | None = None  # a segmenter's: the region's rank among its image's regions (None: another task's)
    region: str | None = None  # a segmenter's: what the region is (predicted, box, mask, truth)
    class_index: int | None = None
    class_name: str | None = None
    probability: float | None = None  # the class's probability; a detection's score; None for a similarity (see score)
    score: float | None = None  # the model's raw score: a class's logit, a detection's score, a prompt's or reference's similarity
    target: str | None = None  # what the maps explain, as explain's records say it (vocab.TargetKind)
    blank: bool | None = None
    topk: list[dict[str, Any]] = field(default_factory=list)  # the model's top classes, as explain's records
    metrics: dict[str, float | None] = field(default_factory=dict)
    fractions: list[float] = field(default_factory=list)  # the curves' x: the fraction of pixels removed or restored
    curves: dict[str, list[float]] = field(default_factory=dict)  # deletion, insertion: the class probability at each fraction
    sanity: dict[str, Any] | None = None  # steps, and the map's spearman and ssim with the trained model's after each
    targets: list[TargetRecord] = field(default_factory=list)

    def __post_init__(self) -> None:
        _utf8_fields(self, ("input", "error", "model", "class_name", "layers"))

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, allow_nan=False)
