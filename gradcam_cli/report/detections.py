"""A detector's records as the page's cards: one per kept detection and one per missed object, and the per-class table.

A classifier's image is one card per explained class; a detector's is one
card per object, since each has its own class, score and map. A card shows
its box cut from the photo and from its map (report/thumbs.py: `Crop`):
the detection's own picture (`--each`), else the image's picture, where each
map is drawn inside its own box. Where the truth was given a detection is a
true or a false positive (`match`), and each missed object (`missed`) is a
card too, a false negative with the best candidate the model had there. The
table counts them per class in place of a classifier's confusion matrix.
"""

from __future__ import annotations

from typing import Any

from gradcam_cli.report.check import is_whole
from gradcam_cli.report.thumbs import Crop, crop_region

MATCHES = ("tp", "fp", "fn")
DETECTOR_KINDS = ("detection", "missed", "empty")  # a classifier's cards are "image"


def is_detection(record: dict[str, Any]) -> bool:
    """A detector's record: it lists its detections (a classifier's says null, an older one nothing)."""
    return record.get("detections") is not None


def detection_cards(record: dict[str, Any], common: dict[str, Any]) -> list[dict[str, Any]]:
    """The cards of a detector's image, paths not yet located: its detections, then its missed objects; an image
    with neither (nothing found, nothing missed), one card of its whole picture, kind "empty"."""
    picture, frame = (record.get("outputs") or [None])[0], _frame(record)
    shared = {**common, "probability": None, "blank": False, "_picture": picture, "_npy": None}
    cards = [_found(found, shared, picture, frame) for found in record["detections"]]
    cards += [_missed(lost, shared, picture, frame) for lost in record.get("missed") or []]
    if cards:
        return cards
    return [{**shared, "kind": "empty", "class_index": None, "class_name": None, "match": None, "_overlay": picture, "_crop": None}]


def _frame(record: dict[str, Any]) -> tuple[int, int] | None:
    """The photo's width and height as the record says them, where its boxes are (None: not said)."""
    width, height = record.get("width") or 0, record.get("height") or 0
    return (width, height) if is_whole(width) and is_whole(height) and width > 0 and height > 0 else None


def _crop(box: list[float], frame: tuple[int, int] | None) -> Crop | None:
    """The box to cut from the card's pictures; None (the whole pictures) where it lies outside the photo."""
    crop = Crop((box[0], box[1], box[2], box[3]), frame)
    return crop if frame is None or crop_region(crop, frame) is not None else None


def _object(kind: str, entry: dict[str, Any], shared: dict[str, Any], picture: str | None, frame: tuple[int, int] | None) -> dict[str, Any]:
    """What a detection's card and a missed object's card both hold: where, what, and how its map lies."""
    return {
        **shared,
        "kind": kind,
        "rank": entry.get("rank"),
        "class_index": entry.get("class_index"),
        "class_name": entry.get("class_name"),
        "box": entry["box"],
        "blank": bool(entry.get("blank")),
        "energy_in_box": entry.get("energy_in_box"),
        "peak_in_box": entry.get("peak_in_box"),
        "own_overlay": bool(entry.get("overlay")),
        "_overlay": entry.get("overlay") or picture,
        "_crop": _crop(entry["box"], frame),
    }


def _found(found: dict[str, Any], shared: dict[str, Any], picture: str | None, frame: tuple[int, int] | None) -> dict[str, Any]:
    return {
        **_object("detection", found, shared, picture, frame),
        "score": found["score"],
        "match": found.get("match"),
        "iou": found.get("iou"),
    }


def _missed(lost: dict[str, Any], shared: dict[str, Any], picture: str | None, frame: tuple[int, int] | None) -> dict[str, Any]:
    return {
        **_object("missed", lost, shared, picture, frame),
        "score": None,
        "match": "fn",
        "iou": None,
        "candidate_box": lost.get("candidate_box"),
        "candidate_score": lost.get("candidate_score"),
        "candidate_iou": lost.get("candidate_iou"),
    }


def class_table(cards: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Per class: kept detections, true and false positives, missed objects, the mean share of a detection's map
    inside its box, and where the truth was given precision and recall; the same over every class. None: no
    detector's card."""
    if not any(card.get("kind") in DETECTOR_KINDS for card in cards):
        return None
    found = [card for card in cards if card["kind"] in ("detection", "missed")]
    rows: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for card in found:
        rows.setdefault((card["class_name"], card["class_index"]), []).append(card)
    judged = any(card["match"] in MATCHES for card in found)
    table = [{"class_name": name, "class_index": index, **_counts(group, judged)} for (name, index), group in rows.items()]
    table.sort(key=lambda row: (-(row["fp"] + row["fn"]) * judged, -row["detections"], str(row["class_name"] or row["class_index"])))
    return {"has_truth": judged, "classes": table, "all": _counts(found, judged)}


def _counts(cards: list[dict[str, Any]], judged: bool) -> dict[str, Any]:
    """The figures of one row of the table."""
    kept = [card for card in cards if card["kind"] == "detection"]
    tp, fp, fn = (sum(1 for card in cards if card["match"] == match) for match in MATCHES)
    energies = [card["energy_in_box"] for card in kept if isinstance(card["energy_in_box"], (int, float))]
    return {
        "detections": len(kept),
        "tp": tp,
        "fp": fp,
        "fn": fn,
        "energy_in_box": round(sum(energies) / len(energies), 6) if energies else None,
        "precision": round(tp / (tp + fp), 6) if judged and tp + fp else None,
        "recall": round(tp / (tp + fn), 6) if judged and tp + fn else None,
    }
