"""Which JSON lines are records the report can show, and which runs lines it can say.

A records file is anyone's text: a line edited by hand, written by another
tool or another version. A record is shown only when every field the page
reads has the type explain writes (records.py), every number is finite and
every string is valid UTF-8 (no lone surrogate from a `\\ud800` escape), a
detector's boxes are four such numbers, and a segmenter's regions are of a kind
explain writes (a kind the page has no words for would be a card it cannot say);
anything else is a bad line, counted and left out, never an internal error
half-way through the build. A record's `target` is any text: the kinds whose
map explains a score (prompt, reference, regression: report/scores.py) get
their own words, any other is shown as a class; `prompts` and `references`
(the texts, the reference images a similarity is to) are lists of text or null.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

Check = Callable[[Any], bool]


def parse(line: str) -> Any:
    """One JSON line; ValueError for text that is not JSON, NaN or Infinity, or nesting too deep to read."""
    try:
        return json.loads(line, parse_constant=_no_constant)
    except RecursionError:  # "[[[[…" thousands deep
        raise ValueError("nested too deep") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def is_text(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: no UTF-8 page could hold it
        return False
    return True


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def is_whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_flag(value: Any) -> bool:
    return isinstance(value, bool)


def optional(check: Check) -> Check:
    return lambda value: value is None or check(value)


def list_of(check: Check) -> Check:
    return lambda value: isinstance(value, list) and all(check(item) for item in value)


def shaped(fields: dict[str, Check], required: tuple[str, ...] = ()) -> Check:
    """A JSON object whose named fields pass their checks (a field left out counts as null), `required` ones present."""

    def check(value: Any) -> bool:
        return (
            isinstance(value, dict)
            and all(name in value for name in required)
            and all(test(value.get(name)) for name, test in fields.items())
        )

    return check


def is_box(value: Any) -> bool:
    """x1, y1, x2, y2: four finite numbers."""
    return isinstance(value, list) and len(value) == 4 and all(is_number(number) for number in value)


def _metrics(value: Any) -> bool:
    return isinstance(value, dict) and all(is_text(name) and (number is None or is_number(number)) for name, number in value.items())


TEXT, NUMBER, WHOLE, FLAG = optional(is_text), optional(is_number), optional(is_whole), optional(is_flag)
TEXTS, METRICS = optional(list_of(is_text)), optional(_metrics)
TOP_ENTRY = shaped({"index": WHOLE, "name": TEXT, "probability": is_number}, required=("probability",))
TARGET = shaped(
    {"class_index": WHOLE, "class_name": TEXT, "score": NUMBER, "probability": NUMBER, "blank": FLAG, "overlay": TEXT, "raw": TEXT,
     "metrics": METRICS}
)  # fmt: skip
SETTINGS = shaped({"norm": TEXT, "colormap": TEXT})
FOUND = shaped(  # records.DetectionRecord: a kept detection (its match "tp" or "fp" where the truth was given)
    {"rank": WHOLE, "box": is_box, "class_index": WHOLE, "class_name": TEXT, "score": is_number, "blank": FLAG,
     "energy_in_box": NUMBER, "peak_in_box": FLAG, "overlay": TEXT, "match": optional(lambda m: m in ("tp", "fp")), "iou": NUMBER,
     "mask_area": WHOLE, "energy_in_mask": NUMBER},
    required=("box", "score"),
)  # fmt: skip
MISSED = shaped(  # records.MissedRecord: a true object no kept detection matched
    {"rank": WHOLE, "box": is_box, "class_index": WHOLE, "class_name": TEXT, "candidate_box": optional(is_box),
     "candidate_score": NUMBER, "candidate_iou": NUMBER, "blank": FLAG, "energy_in_box": NUMBER, "peak_in_box": FLAG, "overlay": TEXT},
    required=("box",),
)  # fmt: skip
REGION_KINDS = ("predicted", "box", "mask", "truth", "missed")  # found.Segment.kind: where a segmenter's region came from
SEGMENT = shaped(  # records.SegmentRecord: an explained region of a segmenter's image
    {"rank": WHOLE, "class_index": is_whole, "class_name": TEXT, "region": lambda kind: kind in REGION_KINDS, "area": WHOLE,
     "area_fraction": NUMBER, "score": NUMBER, "mean_probability": NUMBER, "blank": FLAG, "energy_in_region": NUMBER,
     "iou": NUMBER, "dice": NUMBER, "missed_area": WHOLE, "overlay": TEXT},
    required=("class_index", "region"),
)  # fmt: skip
OVERLAP = shaped(  # records.OverlapRecord: with truth, one class of a segmenter's image against its true mask
    {"class_index": is_whole, "class_name": TEXT, "iou": NUMBER, "dice": NUMBER, "true_area": WHOLE, "predicted_area": WHOLE,
     "missed_area": WHOLE},
    required=("class_index",),
)  # fmt: skip
RECORD = shaped(
    {
        "input": is_text,
        "ok": is_flag,
        "error": TEXT,
        "skipped": FLAG,
        "model": TEXT,
        "target": TEXT,  # what the maps explain (vocab.TargetKind), maybe with ", negative"
        "method": TEXT,
        "layers": TEXTS,
        "true_class": TEXT,
        "correct": FLAG,
        "outputs": TEXTS,
        "class_index": WHOLE,
        "class_name": TEXT,
        "score": NUMBER,
        "probability": NUMBER,
        "blank": FLAG,
        "topk": optional(list_of(TOP_ENTRY)),
        "targets": optional(list_of(TARGET)),
        "metrics": METRICS,
        "settings": optional(SETTINGS),
        "detections": optional(list_of(FOUND)),
        "missed": optional(list_of(MISSED)),
        "detection": WHOLE,  # an evaluation's unit: a detection's rank, a region's (part of the key records merge by)
        "segment": WHOLE,
        "segments": optional(list_of(SEGMENT)),
        "overlap": optional(list_of(OVERLAP)),
        "prompts": TEXTS,  # the texts a CLIP-style model scored the image against
        "references": TEXTS,  # an embedding model's reference images, as the run was given them
        "frame": WHOLE,  # a video's frame: its index among all the video's frames (report/videos.py)
        "time": NUMBER,  # its time in seconds
        "clip": WHOLE,  # a video classifier's clip that frame's map and class come from
        "slice": WHOLE,  # a volume's slice: its index in the plane's stack
        "intensity": TEXT,  # how the volume's intensities were scaled
    },
    required=("input", "ok"),
)
RUN_FIELDS: dict[str, Check] = {
    "id": is_text,
    "command": TEXT,
    "cwd": TEXT,
    "started": TEXT,
    "finished": TEXT,
    "interrupted": FLAG,
    "model": TEXT,
    "weights": TEXT,
    "weights_sha256": TEXT,
    "pretrained": FLAG,
    "method": TEXT,
    "layers": TEXTS,
    "version": TEXT,
    "device": TEXT,
    "shard": TEXT,
    "counts": optional(lambda counts: isinstance(counts, dict) and all(is_text(k) and is_whole(v) for k, v in counts.items())),
}


def is_record(value: Any) -> bool:
    """A record the report can show: explain's (or eval's) fields with their types."""
    return RECORD(value)


def run_entry(value: Any) -> dict[str, Any] | None:
    """A runs-file line as the report keeps it: the fields it knows that have their type (a wrong one is left
    out, so the run still shows what is right about it); None when it has no id to join its lines by."""
    if not isinstance(value, dict) or not is_text(value.get("id")):
        return None
    return {name: value[name] for name, check in RUN_FIELDS.items() if name in value and check(value[name])}
