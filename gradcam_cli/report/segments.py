"""A segmenter's records as the page's cards: one per explained region, and the table per class.

A classifier's image is one card per explained class, a detector's one per
object; a segmenter's is one per region (`segments`), each with its own
class, kind (predicted, box, mask, truth, missed), area and map. A missed
region (the truth says its class, the model another) is a card too, marked
as such.

A card shows whole pictures, never a cut: a region is a set of pixels,
often scattered (every pixel the model gave a class), and the record holds
only its area, no box or mask to cut by. Its outline is already drawn in the
pictures explain wrote: the region's own overlay (`--each`: its whole map,
only its outline, so the evidence it draws from outside shows too), else the
image's picture (every region's map inside its outline, each labelled with
its class and share). The card takes the first of those, whole, beside the
whole photo, and its text says which region it is.

The table per class, in place of the confusion matrix, is read from the
records themselves: a region's figures (area, mean probability, energy in
region) from `segments`, and with truth the class's IoU, Dice and missed
pixels from `overlap`, one entry per image and class that the truth or the
model gives a pixel, so a class the run did not explain still has its IoU.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

ClassKey = tuple[Any, Any]  # (class_name, class_index)


def is_segmentation(record: dict[str, Any]) -> bool:
    """A segmenter's record: it lists its regions (a classifier's and a detector's say null, an older one nothing)."""
    return record.get("segments") is not None


def segment_cards(record: dict[str, Any], common: dict[str, Any]) -> list[dict[str, Any]]:
    """The cards of a segmenter's image, paths not yet located: one per region in the record's order; an image with no
    region (no class covered the minimum area), one card of its whole picture with no class."""
    picture = (record.get("outputs") or [None])[0]
    shared = {**common, "kind": "segment", "probability": None, "blank": False, "_picture": picture, "_npy": None, "_crop": None}
    cards = [_region(entry, shared, picture) for entry in record["segments"]]
    if cards:
        return cards
    return [{**shared, "region": None, "class_index": None, "class_name": None, "own_overlay": False, "_overlay": picture}]


def _region(entry: dict[str, Any], shared: dict[str, Any], picture: str | None) -> dict[str, Any]:
    """One region's card: what, where, how sure the model is there, how its map lies, and how the class fares."""
    return {
        **shared,
        "rank": entry.get("rank"),
        "class_index": entry["class_index"],
        "class_name": entry.get("class_name"),
        "region": entry["region"],
        "area": entry.get("area"),
        "area_fraction": entry.get("area_fraction"),
        "score": entry.get("score"),
        "mean_probability": entry.get("mean_probability"),
        "blank": bool(entry.get("blank")),
        "energy_in_region": entry.get("energy_in_region"),
        "iou": entry.get("iou"),
        "dice": entry.get("dice"),
        "missed_area": entry.get("missed_area"),
        "own_overlay": bool(entry.get("overlay")),
        "_overlay": entry.get("overlay") or picture,
    }


class _Class:
    """What the records say of one class: the images it shows in, its regions (explained, missed), its overlaps."""

    def __init__(self) -> None:
        self.images: set[int] = set()
        self.regions: list[dict[str, Any]] = []
        self.missed: list[dict[str, Any]] = []
        self.overlaps: list[dict[str, Any]] = []


def segment_table(records: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """Per class: images, regions explained and missed, their mean area, probability and energy in region, and with
    truth the mean IoU and Dice over the images where the truth or the model gives it a pixel, and the pixels missed;
    the same over every class (IoU and Dice: the mean of the classes' means). None: no segmenter's record."""
    images = [record for record in records if record.get("ok") and is_segmentation(record)]
    if not images:
        return None
    judged = any(record.get("overlap") is not None for record in images)
    classes: dict[ClassKey, _Class] = {}
    for number, record in enumerate(images):
        for entry in record["segments"]:
            seen = classes.setdefault((entry.get("class_name"), entry["class_index"]), _Class())
            seen.images.add(number)
            (seen.missed if entry["region"] == "missed" else seen.regions).append(entry)
        for one in record.get("overlap") or []:
            seen = classes.setdefault((one.get("class_name"), one["class_index"]), _Class())
            seen.overlaps.append(one)
            if (one.get("true_area") or 0) + (one.get("predicted_area") or 0) > 0:
                seen.images.add(number)
    rows = [{"class_name": name, "class_index": index, **_figures(seen, judged)} for (name, index), seen in classes.items()]
    rows.sort(key=lambda row: _order(row, judged))
    every = _Class()
    for seen in classes.values():
        every.regions += seen.regions
        every.missed += seen.missed
    total = {**_figures(every, judged), "images": len(images)}
    total["iou"], total["dice"] = (_mean(row[name] for row in rows) for name in ("iou", "dice"))
    total["missed_area"] = sum(row["missed_area"] or 0 for row in rows) if judged else None
    return {"has_truth": judged, "classes": rows, "all": total}


def _order(row: dict[str, Any], judged: bool) -> tuple[Any, ...]:
    """With truth the worst first (the lowest mean IoU, a class without one last), else the most regions first."""
    iou = row["iou"] if judged and row["iou"] is not None else 2.0
    return (iou, -row["regions"] - row["missed"], str(row["class_name"] if row["class_name"] is not None else row["class_index"]))


def _figures(seen: _Class, judged: bool) -> dict[str, Any]:
    """The figures of one row of the table."""
    return {
        "images": len(seen.images),
        "regions": len(seen.regions),
        "missed": len(seen.missed),
        "area_fraction": _mean(entry.get("area_fraction") for entry in seen.regions),
        "mean_probability": _mean(entry.get("mean_probability") for entry in seen.regions),
        "energy_in_region": _mean(entry.get("energy_in_region") for entry in seen.regions),
        "iou": _mean(one.get("iou") for one in seen.overlaps),
        "dice": _mean(one.get("dice") for one in seen.overlaps),
        "missed_area": sum(one.get("missed_area") or 0 for one in seen.overlaps) if judged else None,
    }


def _mean(values: Iterable[Any]) -> float | None:
    """The mean of the numbers among `values` (None and a blank map's missing energy left out); None: no number."""
    numbers = [value for value in values if isinstance(value, (int, float)) and not isinstance(value, bool)]
    return round(sum(numbers) / len(numbers), 6) if numbers else None
