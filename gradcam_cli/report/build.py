"""`gradcam report OUT_DIR [RECORDS...]` and `explain --report`: records → cards with thumbnails → one page.

The page goes to `OUT_DIR/report/`: index.html and its scripts, data.js, and
thumbs/. It links the full-size pictures where they are, relative to itself,
so the folder can be moved as a whole (output folder and inputs together).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path, PurePath
from typing import Any

from gradcam_cli.version import __version__
from gradcam_cli.outputs.provenance import is_records_picture
from gradcam_cli.outputs.run_files import now
from gradcam_cli.report.cards import Locate, header, link, locator, place_files, record_cards, set_thumbs
from gradcam_cli.report.collect import Warn, collect
from gradcam_cli.report.legend import legends
from gradcam_cli.report.page import write_page
from gradcam_cli.report.segments import segment_table
from gradcam_cli.report.thumbs import Crop, Fit, Thumb, make_crop_thumbs, make_thumbs
from gradcam_cli.report.videos import sequence_cards, strip_notes

REPORT_FOLDER = "report"
Place = tuple[Path | None, Path | None, Crop | None]  # a card's photo, its overlay, and the box cut from both (None: whole)
Cut = tuple[Path | None, Crop | None]  # a picture and the box cut from it


def build_report(output_dir: Path, record_paths: Iterable[Path] = (), warn: Warn = lambda _m: None, workers: int = 0) -> Path:
    """Build the report of an output folder (and of the named records files); return its index.html."""
    collected = collect(output_dir, record_paths, warn)
    report_dir = output_dir / REPORT_FOLDER
    locate = locator(collected.bases)
    cards, places, replaced = [], [], 0
    workers = workers or min(8, os.cpu_count() or 1)
    images, sequences = sequence_cards(collected.records, locate, report_dir, collected.writers, workers)
    for record in images:
        for card in record_cards(record):
            written, picture = card["_overlay"], card.get("_picture")
            photo, overlay, crop = place_files(card, locate, report_dir)
            if overlay is not None and not is_records_picture(record, overlay, collected.writers.get(str(written))):
                card["overlay"] = card["npy"] = None  # a later run wrote over its picture: never show another run's map
                card["replaced"], overlay, replaced = True, None, replaced + 1
            every_box = locate(picture) if card.get("picture") else None  # a detector's picture beside its own
            if every_box is not None and not is_records_picture(record, every_box, collected.writers.get(str(picture))):
                card["picture"] = None
            cards.append(card)
            places.append((photo, overlay, crop))
    if replaced:
        warn(f"{replaced} card(s) show no map: a later run with other settings wrote over their pictures (its cards show them)")
    _thumbnails(report_dir, cards, places, workers)
    cards += sequences
    for note in strip_notes(sequences):
        warn(note)
    lost = _references(report_dir, cards, locate, workers)
    if lost:
        warn(f"{lost} reference image(s) are not where the records say; their cards name them without a picture")
    missing = sum(1 for card in cards if card["ok"] and not card["thumb"] and not card["overlay_thumb"] and not _said(card))
    if missing:
        warn(f"{missing} card(s) have no picture: their files are not where the records say (run the report where the run ran)")
    for number, card in enumerate(cards):
        card["id"] = number
    data: dict[str, Any] = {"header": header(cards, collected.runs, now(), __version__), "cards": cards}
    data["header"]["legend"] = legends(collected.records, collected.runs)
    data["header"]["segmentation"] = segment_table(collected.records)  # from the records: the overlap is per image, not per card
    return write_page(report_dir, data)


def _said(card: dict[str, Any]) -> bool:
    """A card that already says why it shows no picture: a later run wrote over it, a video's strip could not be cut."""
    return bool(card.get("replaced") or card.get("strip_note"))


def _thumbnails(report_dir: Path, cards: list[dict[str, Any]], places: list[Place], workers: int) -> None:
    """Photos first (one thumbnail per photo, shared by its cards), then each overlay fitted to its photo's; a
    detector's cards: their boxes cut from both (report/thumbs.py)."""
    whole = [(photo, overlay) for photo, overlay, crop in places if crop is None]
    photos = list(dict.fromkeys(photo for photo, _ in whole if photo is not None))
    photo_thumbs = dict(zip(photos, make_thumbs(report_dir, ((photo, "", None) for photo in photos), workers)))
    overlay_jobs: dict[Path, Fit] = {}  # a segmenter's cards share the image's picture: one thumbnail each
    for photo, overlay in whole:
        if overlay is not None:
            box = photo_thumbs.get(photo) if photo is not None else None
            overlay_jobs.setdefault(overlay, (box.width, box.height) if box else None)
    jobs = [(overlay, "o", fit) for overlay, fit in overlay_jobs.items()]
    overlay_thumbs = dict(zip(overlay_jobs, make_thumbs(report_dir, jobs, workers)))
    cut = _crops(report_dir, [place for place in places if place[2] is not None], workers)
    for card, (photo, overlay, crop) in zip(cards, places):
        if crop is not None:
            set_thumbs(card, cut.get((photo, crop)), cut.get((overlay, crop)))
        else:
            set_thumbs(card, photo_thumbs.get(photo) if photo else None, overlay_thumbs.get(overlay) if overlay else None)


def _references(report_dir: Path, cards: list[dict[str, Any]], locate: Locate, workers: int) -> int:
    """A reference card's reference images, each linked where it is and a thumbnail of it (one per picture, shared by
    every card that names it, and by the cards of its own when it is also an input); returns how many were not found."""
    given = {number: card.pop("_references") for number, card in enumerate(cards) if "_references" in card}
    found = {text: locate(text) for texts in given.values() for text in texts}
    pictures = list(dict.fromkeys(path for path in found.values() if path is not None))
    thumbs = dict(zip(pictures, make_thumbs(report_dir, ((picture, "", None) for picture in pictures), workers)))
    for number, texts in given.items():
        shown = []
        for text in texts:
            path = found[text]
            thumb = thumbs.get(path) if path is not None else None
            shown.append({
                "input": text, "name": PurePath(text).name, "original": link(path, report_dir),
                "thumb": thumb.name if thumb else None, "thumb_w": thumb.width if thumb else 0, "thumb_h": thumb.height if thumb else 0,
            })  # fmt: skip
        cards[number]["references"] = shown
    return sum(path is None for path in found.values())


def _crops(report_dir: Path, places: list[Place], workers: int) -> dict[Cut, Thumb | None]:
    """Each box cut from its photo (a photo decoded once for all its boxes), then from its map, fitted to the photo's cut."""
    from_photos: dict[Path, dict[Crop, Fit]] = {}
    for photo, _, crop in places:
        if photo is not None and crop is not None:
            from_photos.setdefault(photo, {})[crop] = None
    cut = _cut(report_dir, from_photos, "", workers)
    from_maps: dict[Path, dict[Crop, Fit]] = {}
    for photo, overlay, crop in places:
        if overlay is not None and crop is not None:
            shape = cut.get((photo, crop))
            from_maps.setdefault(overlay, {})[crop] = (shape.width, shape.height) if shape else None
    return {**cut, **_cut(report_dir, from_maps, "o", workers)}


def _cut(report_dir: Path, wanted: dict[Path, dict[Crop, Fit]], kind: str, workers: int) -> dict[Cut, Thumb | None]:
    jobs = [(source, kind, list(crops.items())) for source, crops in wanted.items()]
    made = make_crop_thumbs(report_dir, jobs, workers)
    return {(source, crop): thumb for (source, _, pairs), thumbs in zip(jobs, made) for (crop, _), thumb in zip(pairs, thumbs)}
