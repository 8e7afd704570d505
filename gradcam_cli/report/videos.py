"""A video's records (one per explained frame) and a volume's (one per slice) → one card each, not one per frame.

A video's card shows a strip of key frames cut from its overlay video (the
n-th frame of that video is its n-th explained frame, records sorted by
`frame`): the first and the last, the most confident, and each frame where
the top class changes, thinned evenly to `STRIP_FRAMES`. Its class is the
one most of its frames have, its probability its best frame's, so filters,
sorting and the class counts treat a video as one input. The frames are
decoded with PyAV, imported only here and only when a strip is not fresh;
without it the card has no strip and says why. A volume's card shows its
montage, the slice count, how the intensities were scaled, the classes over
its slices, and links the NIfTI map.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path, PurePath
from typing import Any

from gradcam_cli.outputs.provenance import is_records_picture
from gradcam_cli.report.cards import Locate, link
from gradcam_cli.report.scores import target_kind
from gradcam_cli.report.thumbs import Thumb, make_thumbs, reused_thumb, thumb_name, write_thumb

STRIP_FRAMES = 8  # key frames on a video's card at most: a strip that fits a card's width in two rows
NIFTI_MAP = ".nii.gz"  # a volume's map volume, beside its montage `NAME.METHOD.png` (outputs/volume_files.py)
NO_PYAV = "no key frames: PyAV is not installed (pip install 'gradcam-cli[video]')"
Group = list[dict[str, Any]]
Writers = dict[str, dict[str, Any]]
Warn = Callable[[str], None]


def split_sequences(records: Iterable[dict[str, Any]]) -> tuple[Group, dict[tuple[Any, ...], Group], dict[tuple[Any, ...], Group]]:
    """The records that are cards of their own, and the videos' and the volumes' records grouped by input, model and
    method (a run of another model or method is a card of its own, as an image's is). A volume is a record per slice
    (--slices), or one record of the whole volume (a 3-D model: it says its intensity scaling, no slice; a 3-D
    segmenter's is its regions' cards)."""
    others: Group = []
    videos: dict[tuple[Any, ...], Group] = {}
    volumes: dict[tuple[Any, ...], Group] = {}
    for record in records:
        key = (record["input"], record.get("model"), record.get("method"))
        if record.get("frame") is not None:
            videos.setdefault(key, []).append(record)
        elif record.get("slice") is not None or (record.get("ok") and isinstance(record.get("intensity"), str) and not _regions(record)):
            volumes.setdefault(key, []).append(record)
        else:
            others.append(record)
    return others, videos, volumes


def _regions(record: dict[str, Any]) -> bool:
    """A 3-D segmenter's volume: its regions are cards of their own, each with its montage (report/segments.py)."""
    return record.get("segments") is not None


def _explained(record: dict[str, Any]) -> tuple[Any, Any]:
    """A frame's (slice's) explained class, name and index, as its record or its first target says it."""
    target = (record.get("targets") or [{}])[0]
    return record.get("class_name", target.get("class_name")), record.get("class_index", target.get("class_index"))


def _probability(record: dict[str, Any]) -> float:
    value = record.get("probability")
    if value is None:
        value = ((record.get("targets") or [{}])[0]).get("probability")
    return float(value) if isinstance(value, (int, float)) else -1.0


def key_frames(frames: Group, limit: int = STRIP_FRAMES) -> list[int]:
    """The positions (in `frames`, sorted by frame) a strip shows: the first, the last, the most confident, and each
    where the explained class changes; more than `limit`: the changes thinned evenly, the other three kept."""
    if not frames:
        return []
    last = len(frames) - 1
    best = max(range(len(frames)), key=lambda n: (_probability(frames[n]), -n))
    kept = sorted({0, last, best})
    changes = [n for n in range(1, len(frames)) if _explained(frames[n]) != _explained(frames[n - 1]) and n not in kept]
    room = max(0, limit - len(kept))
    if len(changes) > room:
        changes = [changes[round(k * (len(changes) - 1) / (room - 1))] for k in range(room)] if room > 1 else changes[:room]
    return sorted(set(kept) | set(changes))


def _classes(records: Group) -> list[dict[str, Any]]:
    """The explained classes over the frames (slices), the most frequent first, then the first seen."""
    counted = Counter(_explained(record) for record in records)
    return [{"class_name": name, "class_index": index, "count": n} for (name, index), n in counted.most_common()]


def _common(records: Group, kind: str) -> dict[str, Any]:
    """A card of a whole video (volume) as the page's filters read it: the class most of its frames (slices) explain,
    the best one's probability, the top-1 most of them have (right or wrong as those frames are), the classes counted."""
    best = max(records, key=_probability)
    classes = _classes(records)
    tops = [(r.get("topk") or [None])[0] for r in records]
    named = Counter((top.get("name"), top.get("index")) for top in tops if isinstance(top, dict)).most_common(1)
    predicted = named[0][0] if named else (None, None)
    judged = [r.get("correct") for r, top in zip(records, tops) if isinstance(top, dict) and (top["name"], top["index"]) == predicted]
    best_top = best.get("topk") or []
    margin = float(best_top[0]["probability"]) - (float(best_top[1]["probability"]) if len(best_top) > 1 else 0.0) if best_top else None
    return {
        "kind": kind, "input": best["input"], "name": PurePath(best["input"]).name, "ok": True, "error": None,
        "skipped": all(bool(r.get("skipped")) for r in records), "predicted": predicted[0], "predicted_index": predicted[1],
        "margin": round(margin, 6) if margin is not None else None, "topk": best_top, "true_class": best.get("true_class"),
        "correct": next((value for value in judged if value is not None), None), "method": best.get("method"),
        "layers": best.get("layers") or [], "model": best.get("model"), "target": target_kind(best),
        "class_name": classes[0]["class_name"], "class_index": classes[0]["class_index"], "probability": best.get("probability"),
        "blank": all(bool(r.get("blank")) for r in records), "metrics": {}, "npy": None, "classes": classes, "count": len(records),
        "best": best.get("frame") if kind == "video" else best.get("slice"),
    }  # fmt: skip


def _ours(records: Group, output: Path, writer: dict[str, Any] | None) -> bool:
    """Whether the video (montage) shows these frames' (slices') maps, not a later run's: its stamp is theirs, or
    where it carries none (PyAV missing), the last record that wrote it is one of them or says the same making."""
    mine = next((record for record in records if record is writer), records[-1])
    return is_records_picture(mine, output, writer)


def _frame_thumbs(report_dir: Path, video: Path, positions: list[int]) -> tuple[dict[int, Thumb], str | None]:
    """The thumbnails of these frames of an overlay video (fresh ones reused, the video decoded only up to the last
    one needed otherwise); a note instead when PyAV is missing or the video cannot be read."""
    names = {n: thumb_name(video, f"f{n}") for n in positions}
    made = {n: reused_thumb(report_dir, name, video, None) for n, name in names.items()}
    wanted = {n for n, thumb in made.items() if thumb is None}
    if wanted:
        try:
            import av
        except ImportError:
            return {}, NO_PYAV
        try:
            with av.open(str(video)) as container:
                for number, frame in enumerate(container.decode(video=0)):
                    if number in wanted:
                        made[number] = write_thumb(report_dir, names[number], frame.to_image().convert("RGB"), None)
                    if number >= max(wanted):
                        break
        except (av.FFmpegError, OSError, ValueError) as error:
            return {n: t for n, t in made.items() if t is not None}, f"no key frames: the overlay video cannot be read ({error})"
    return {n: t for n, t in made.items() if t is not None}, None


def video_card(records: Group, locate: Locate, report_dir: Path, writers: Writers) -> dict[str, Any]:
    """One video's card: its strip of key frames (each with its time, class and probability), its overlay video."""
    frames = sorted(records, key=lambda record: int(record["frame"]))
    card = _common(frames, "video")
    written = (frames[0].get("outputs") or [None])[0]
    video = locate(written)
    if video is not None and not _ours(frames, video, writers.get(str(written))):
        card["replaced"], video = True, None  # a later run with other settings wrote over it: none of its frames shown
    card["original"], card["overlay"] = link(locate(card["input"]), report_dir), link(video, report_dir)
    best = frames.index(max(frames, key=_probability))
    positions = key_frames(frames)
    thumbs, note = _frame_thumbs(report_dir, video, positions) if video is not None else ({}, None)
    card["strip"] = [_strip_entry(frames, n, thumbs.get(n), n == best) for n in positions] if thumbs else []
    if note is None and video is not None and not card["strip"]:
        note = "no key frames could be cut from the overlay video"
    card["strip_note"] = note
    card["duration"] = frames[-1].get("time")
    shown = thumbs.get(best) or next(iter(thumbs.values()), None)
    card["thumb"], card["overlay_thumb"] = None, shown.name if shown else None
    card["thumb_w"], card["thumb_h"] = (shown.width, shown.height) if shown else (0, 0)
    return card


def _strip_entry(frames: Group, position: int, thumb: Thumb | None, best: bool) -> dict[str, Any]:
    record = frames[position]
    name, index = _explained(record)
    changed = position > 0 and (name, index) != _explained(frames[position - 1])
    return {
        "position": position, "frame": record.get("frame"), "time": record.get("time"), "clip": record.get("clip"),
        "class_name": name, "class_index": index, "probability": record.get("probability"), "best": best, "change": changed,
        "thumb": thumb.name if thumb else None, "thumb_w": thumb.width if thumb else 0, "thumb_h": thumb.height if thumb else 0,
    }  # fmt: skip


def volume_card(records: Group, locate: Locate, report_dir: Path, writers: Writers) -> tuple[dict[str, Any], Path | None]:
    """One volume's card: its montage, its slices' classes, how its intensities were scaled, its NIfTI map; returns
    the montage to make a thumbnail of."""
    slices = sorted(records, key=lambda record: int(record.get("slice") or 0))
    card = _common(slices, "volume")
    card["whole"] = all(record.get("slice") is None for record in slices)  # through a 3-D model at once: no slices
    written = (slices[0].get("outputs") or [None])[0]
    montage = locate(written)
    if montage is not None and not _ours(slices, montage, writers.get(str(written))):
        card["replaced"], montage = True, None
    card["original"], card["overlay"] = link(locate(card["input"]), report_dir), link(montage, report_dir)
    nifti = montage.with_name(montage.name.removesuffix(".png") + NIFTI_MAP) if montage is not None else None
    card["nifti"] = link(nifti if nifti is not None and nifti.is_file() else None, report_dir)
    card["intensity"] = next((r["intensity"] for r in slices if isinstance(r.get("intensity"), str)), None)
    return card, montage


def sequence_cards(
    records: Iterable[dict[str, Any]], locate: Locate, report_dir: Path, writers: Writers, workers: int
) -> tuple[Group, Group]:
    """The records that are cards of their own (images), and a card per video and per volume, thumbnails made."""
    others, videos, volumes = split_sequences(records)
    cards = [video_card(group, locate, report_dir, writers) for group in videos.values()]
    made = [volume_card(group, locate, report_dir, writers) for group in volumes.values()]
    montages = make_thumbs(report_dir, ((montage, "m", None) for _, montage in made if montage is not None), workers)
    pictures = iter(montages)
    for card, montage in made:
        thumb = next(pictures) if montage is not None else None
        card["thumb"], card["overlay_thumb"] = None, thumb.name if thumb else None
        card["thumb_w"], card["thumb_h"] = (thumb.width, thumb.height) if thumb else (0, 0)
        cards.append(card)
    return others, cards


def strip_notes(cards: Iterable[dict[str, Any]]) -> list[str]:
    """What the build says once about the strips it could not cut (PyAV missing: one line for all videos)."""
    notes = Counter(card["strip_note"] for card in cards if card.get("kind") == "video" and card.get("strip_note"))
    return [f"{n} video card(s): {note}" for note, n in notes.items()]
