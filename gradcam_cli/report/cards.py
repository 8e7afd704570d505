"""Records → the page's cards (one per image and explained class; a detector's: report/detections.py; a segmenter's:
report/segments.py; a prompt's, a reference's, a regression's score: report/scores.py) and its header, in
report/page.py's schema."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path, PurePath
from typing import Any

from gradcam_cli.report.check import is_text
from gradcam_cli.report.detections import class_table, detection_cards, is_detection
from gradcam_cli.report.legend import run_colours
from gradcam_cli.report.scores import is_scored, score_table, scored_fields, target_kind
from gradcam_cli.report.segments import is_segmentation, segment_cards
from gradcam_cli.report.thumbs import Crop, Thumb

Locate = Callable[[str | None], Path | None]


def locator(bases: list[Path]) -> Locate:
    """A record's path → the file it names: as it is, else from each folder a run started in; None if none exists."""

    def locate(text: str | None) -> Path | None:
        if not text:
            return None
        path = Path(text)
        for candidate in [path] if path.is_absolute() else [base / path for base in bases]:
            try:
                if candidate.is_file():
                    return candidate
            except (OSError, ValueError):  # a name too long here (a record from another file system), a NUL in it
                continue
        return None

    return locate


def link(path: Path | None, report_dir: Path) -> str | None:
    """A file as the page links it: its path relative to the report folder, as plain text (the page percent-encodes
    each segment once, so `#`, `?`, `%`, spaces and accents in names stay part of it); None where no page could say it."""
    if path is None:
        return None
    try:
        relative = os.path.relpath(os.path.abspath(path), os.path.abspath(report_dir))
    except ValueError:  # on another drive (Windows): the absolute path, which the page turns into a file:/// URL
        relative = os.path.abspath(path)
    text = PurePath(relative).as_posix()
    return text if is_text(text) else None  # bytes that are not UTF-8 in a folder's name: no link rather than a wrong one


def _predicted(record: dict[str, Any]) -> tuple[dict[str, Any] | None, float | None]:
    """The model's top class and its margin over the second."""
    topk = record.get("topk") or []
    if not topk:
        return None, None
    second = topk[1]["probability"] if len(topk) > 1 else 0.0
    return topk[0], round(float(topk[0]["probability"]) - float(second), 6)


def record_cards(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The cards of one record, paths not yet located: one per explained class (a detector's: one per object; a
    segmenter's: one per region); a failed or skipped image: one."""
    top, margin = _predicted(record)
    common = {
        "kind": "image",
        "input": record["input"],
        "name": PurePath(record["input"]).name,
        "ok": bool(record.get("ok")),
        "error": record.get("error"),
        "skipped": bool(record.get("skipped")),
        "predicted": top.get("name") if top else None,
        "predicted_index": top.get("index") if top else None,
        "margin": margin,
        "topk": record.get("topk") or [],
        "true_class": record.get("true_class"),
        "correct": record.get("correct"),
        "method": record.get("method"),
        "layers": record.get("layers") or [],
        "model": record.get("model"),
        "target": target_kind(record),
    }
    if record.get("ok") and is_detection(record):
        return detection_cards(record, common)
    if record.get("ok") and is_segmentation(record):
        return segment_cards(record, common)
    targets = record.get("targets") or []
    if not targets:
        overlay = (record.get("outputs") or [None])[0]
        # an evaluation's record without an overlay (no ⟨report⟩ when it ran) still has its class and its metrics
        return [
            {
                **common, "class_index": record.get("class_index"), "class_name": record.get("class_name"),
                "probability": record.get("probability"), "blank": bool(record.get("blank")),
                "metrics": record.get("metrics") or {}, "_overlay": overlay, "_npy": None,
                **(scored_fields(record, record) if is_scored(record) else {}),
            }
        ]  # fmt: skip
    return [
        {
            **common,
            "class_index": target.get("class_index"),
            "class_name": target.get("class_name"),
            "probability": target.get("probability"),
            "blank": bool(target.get("blank")),
            "metrics": {**(record.get("metrics") or {}), **(target.get("metrics") or {})},
            "_overlay": target.get("overlay"),
            "_npy": target.get("raw"),
            **(scored_fields(record, target) if is_scored(record) else {}),
        }
        for target in targets
    ]


def place_files(card: dict[str, Any], locate: Locate, report_dir: Path) -> tuple[Path | None, Path | None, Crop | None]:
    """The card's links to its full-size files; returns the photo and the overlay to make thumbnails of, and the box
    to cut from both (a detector's card) or None (the whole pictures)."""
    photo, overlay = locate(card["input"]), locate(card.pop("_overlay"))
    card["original"], card["overlay"] = link(photo, report_dir), link(overlay, report_dir)
    card["npy"] = link(locate(card.pop("_npy")), report_dir)
    if "_picture" in card:  # a detector's or a segmenter's: the image's picture, every box or region, beside the card's own
        picture = locate(card.pop("_picture"))
        card["picture"] = link(picture, report_dir) if picture != overlay else None
    card.setdefault("metrics", {})
    return photo, overlay, card.pop("_crop", None)


def set_thumbs(card: dict[str, Any], photo: Thumb | None, overlay: Thumb | None) -> None:
    shape = photo or overlay
    card["thumb"] = photo.name if photo else None
    card["overlay_thumb"] = overlay.name if overlay else None
    card["thumb_w"], card["thumb_h"] = (shape.width, shape.height) if shape else (0, 0)


def header(cards: list[dict[str, Any]], runs: list[dict[str, Any]], generated: str, version: str) -> dict[str, Any]:
    """What the page says on top: the runs (command, model, weights and their SHA-256), what the cards hold, counts."""
    images = {card["input"] for card in cards}
    judged = {card["input"]: card["correct"] for card in cards if card["correct"] is not None}
    metrics = sorted({name for card in cards for name, value in card["metrics"].items() if isinstance(value, (int, float))})
    return {
        "generated": generated,
        "version": version,
        "runs": [_run(run) for run in runs],
        "models": _distinct(card["model"] for card in cards),
        "methods": _distinct(card["method"] for card in cards),
        "layers": _distinct(layer for card in cards for layer in card["layers"]),
        "counts": {
            "images": len(images),
            "cards": len(cards),
            "failed": len({card["input"] for card in cards if not card["ok"]}),
            "blank": sum(card["blank"] for card in cards),
            "skipped": len({card["input"] for card in cards if card["skipped"]}),
            "with_truth": len({card["input"] for card in cards if card["true_class"] is not None}),
            "correct": sum(1 for value in judged.values() if value),
            "wrong": sum(1 for value in judged.values() if not value),
            **_sequences(cards),
        },
        "has_truth": bool(judged),
        "metrics": metrics,
        "detection": class_table(cards),
        "scores": score_table(cards),
    }


def _sequences(cards: list[dict[str, Any]]) -> dict[str, int]:
    """Where there are videos or volumes: how many, and the frames and slices they explain (one card each, so
    `images` counts each once)."""
    videos = [card["count"] for card in cards if card["kind"] == "video"]
    volumes = [0 if card.get("whole") else card["count"] for card in cards if card["kind"] == "volume"]
    if not videos and not volumes:
        return {}
    return {"videos": len(videos), "frames": sum(videos), "volumes": len(volumes), "slices": sum(volumes)}


def _run(run: dict[str, Any]) -> dict[str, Any]:
    keys = ("command", "started", "finished", "interrupted", "model", "weights", "weights_sha256", "pretrained", "method", "layers")
    shown = {key: run.get(key) for key in (*keys, "version", "device", "shard", "counts")}
    shown["colormap"], shown["norm"] = run_colours(run)
    return shown


def _distinct(values: Iterable[Any]) -> list[Any]:
    return [value for value in dict.fromkeys(values) if value is not None]
