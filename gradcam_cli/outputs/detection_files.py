"""A detector's files and record: every kept box over its own map, one overlay per detection with ⟨each⟩.

The picture of an image shows each detection's map inside its own box,
renormalised there (a weak object's evidence is as visible as a strong one's),
every box drawn in its colour with class and score. `--each` adds
`NAME.EXT.METHOD.detN.png`: detection N's whole map with only its box, so the
evidence it draws from outside its box shows too. The record lists each
detection with its box in the photo's pixels and two localisation figures of
its map: the share of its energy inside the box, and whether its peak is in it.
An instance segmenter's detection (found.Masks) also has its mask outlined in
its colour (outputs/outlines.py), in both pictures, beside its box: the box
keeps its label and frames its map, as the score, the truth's matching and
`energy_in_box` read boxes, and the outline shows which of its pixels the
model calls the object. Its record adds the mask's area and its map's share of
energy inside it. Masks come back on the photo as a segmenter's regions do
(geometry.labels_to_original: the input pixel under each photo pixel's centre).
Maps are put back on the photo one at a time, so memory holds one map, not twenty.
"""

from __future__ import annotations

from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any, Protocol
from collections.abc import Sequence

import numpy as np
import torch

from gradcam_cli.geometry import Geometry, boxes_to_original, labels_to_original, map_to_original
from gradcam_cli.outputs.boxes import DrawnBox, draw_boxes
from gradcam_cli.outputs.naming import OutputNamer
from gradcam_cli.outputs.outlines import DrawnRegion, draw_outlines
from gradcam_cli.outputs.picture import draw
from gradcam_cli.outputs.records import DetectionRecord, ImageRecord, MissedRecord, class_name
from gradcam_cli.found import Judged
from gradcam_cli.maps import normalise
from gradcam_cli.timings import stamp
from gradcam_cli.vocab import Colormap, Style

if TYPE_CHECKING:
    from gradcam_cli.maps import CamBatch


class Pictures(Protocol):
    """What draws and keeps a detector's pictures: the run's writer (outputs/writer.py: files, stamped) or the Python
    API (api.py: arrays, nothing written)."""

    namer: OutputNamer
    class_names: Sequence[str] | None
    context: dict[str, Any]
    colormap: Colormap
    alpha: float
    style: Style
    caption: bool
    raw_norm: bool
    each: bool

    def save(self, path: Path, rgb: np.ndarray) -> None:
        """Keep one picture under its name (the writer: claimed, stamped, written atomically)."""

    def keep_map(self, which: str, cam: np.ndarray) -> None:
        """One object's map on the photo (`det0`, `miss1`), for a caller that returns maps; the writer keeps none."""

    def keep_mask(self, which: str, mask: np.ndarray) -> None:
        """An instance segmenter's detection's mask on the photo (`det0`), bool, for a caller that returns them."""


def detection_path(namer: OutputNamer, base: PurePath, which: str) -> Path:
    """`NAME.EXT.METHOD.detN.png` (a detection) or `.missN.png` (a missed object) beside the image's picture."""
    overlay, _, _ = namer.paths(base, None, False)
    return overlay.with_name(overlay.name[: -len(".png")] + f".{which}.png")


def label_of(names: Sequence[str] | None, index: int, score: float) -> str:
    return f"{class_name(names, index) or f'class {index}'} {score:.2f}"


def write_detections(
    out: Pictures, path: Path, image: np.ndarray, geometry: Geometry, cams: CamBatch, row: int, base: PurePath
) -> ImageRecord:
    """This image's picture (and with ⟨each⟩ one per detection and missed object) and its record."""
    assert cams.found is not None
    found = cams.found[row]
    judged = found if isinstance(found, Judged) else None
    detections = judged.detections if judged is not None else found
    picture, _, _ = out.namer.paths(base, None, False)
    canvas = Canvas(np.zeros(image.shape[:2], np.float32), [])  # each map renormalised inside its own box
    boxes = boxes_to_original(detections.boxes, geometry).tolist() if len(detections) else []
    masks = detections.masks.pixels().cpu().numpy() if detections.masks is not None else None
    records = []
    for k in cams.ranks(row):
        cam = on_photo(out, cams.maps[row, k], geometry)
        out.keep_map(f"det{k}", cam)
        index, score = int(detections.labels[k]), float(detections.scores[k])
        box = DrawnBox(tuple(boxes[k]), label_of(out.class_names, index, score), k)
        outline = None if masks is None else DrawnRegion(labels_to_original(masks[k], geometry, fill=False), "", k)
        if outline is not None:
            out.keep_mask(f"det{k}", outline.region)
        energy, peak = canvas.add(cam, boxes[k], box, outline)
        own = detection_path(out.namer, base, f"det{k}")
        each = _write_each(out, image, cam, box, own, outline) if out.each else None
        records.append(
            DetectionRecord(
                rank=k,
                box=[round(v, 2) for v in boxes[k]],
                class_index=index,
                class_name=class_name(out.class_names, index),
                score=round(score, 6),
                blank=bool(cams.blank[row, k]),
                energy_in_box=energy,
                peak_in_box=peak,
                overlay=str(each) if each else None,
                match=None if judged is None else ("tp" if judged.match[k] is not None else "fp"),
                iou=None if judged is None else round(judged.iou[k], 6),
                mask_area=None if outline is None else int(outline.region.sum()),
                energy_in_mask=None if outline is None else in_region(cam, outline.region)[0],
            )  # fmt: skip
        )
    missed = [_missed(out, image, geometry, judged, j, canvas, base) for j in range(len(judged.missed))] if judged else None
    caption = f"{len(records)} detection{'s' * (len(records) != 1)}" + (f", {len(missed)} missed" if missed else "")
    caption += f"  {out.context['method']} @ {', '.join(out.context['layers'])}"
    _write_picture(out, picture, image, canvas.shown, canvas.boxes, caption if out.caption else None, canvas.outlines)
    written = [r.overlay for r in records if r.overlay] + [m.overlay for m in missed or [] if m.overlay]
    return ImageRecord(
        input=str(path), ok=True, width=int(image.shape[1]), height=int(image.shape[0]), outputs=[str(picture), *written],
        detections=records, missed=missed, **out.context,
    )  # fmt: skip


class Canvas:
    """The image's picture as it is built: each object's map inside its own box, the boxes and masks' outlines to draw."""

    def __init__(self, shown: np.ndarray, boxes: list[DrawnBox]) -> None:
        self.shown, self.boxes = shown, boxes
        self.outlines: list[DrawnRegion] = []

    def add(
        self, cam: np.ndarray, box: list[float], drawn: DrawnBox, outline: DrawnRegion | None = None
    ) -> tuple[float | None, bool | None]:
        """The map put in its box (the brighter where boxes overlap), the box (and its mask's outline) kept; its energy
        in the box and peak."""
        inside, energy, peak = _in_box(cam, box)
        if inside is not None:
            x1, y1, x2, y2 = box_pixels(box, cam.shape)
            np.maximum(self.shown[y1:y2, x1:x2], inside, out=self.shown[y1:y2, x1:x2])
        self.boxes.append(drawn)
        if outline is not None:
            self.outlines.append(outline)
        return energy, peak


def on_photo(out: Pictures, cam: torch.Tensor, geometry: Geometry) -> np.ndarray:
    """A map at the input's size put back on the photo, in [0, 1] for display."""
    return map_to_original(normalise(cam)[0] if out.raw_norm else cam, geometry)


def _missed(out: Pictures, image: np.ndarray, geometry: Geometry, judged: Judged, j: int, canvas: Canvas, base: PurePath) -> MissedRecord:
    """One missed object: its true box dashed, its candidate's map in it, and its record."""
    missed = judged.missed[j]
    box, index, name = judged.truth[missed.truth]
    candidate = missed.candidate
    label = f"missed {name}" + (f" {candidate.score:.2f}" if candidate is not None else "")
    drawn = DrawnBox(box, label, len(judged.detections) + j, dashed=True)
    energy = peak = each = None
    if missed.cam is not None:
        cam = on_photo(out, missed.cam, geometry)
        out.keep_map(f"miss{j}", cam)
        energy, peak = canvas.add(cam, list(box), drawn)
        each = _write_each(out, image, cam, drawn, detection_path(out.namer, base, f"miss{j}")) if out.each else None
    else:
        canvas.boxes.append(drawn)
    where = boxes_to_original(torch.tensor([candidate.box]), geometry)[0].tolist() if candidate is not None else None
    return MissedRecord(
        rank=j, box=[round(v, 2) for v in box], class_index=index, class_name=class_name(out.class_names, index) or name,
        candidate_box=None if where is None else [round(v, 2) for v in where],
        candidate_score=None if candidate is None else round(candidate.score, 6),
        candidate_iou=None if candidate is None else round(candidate.iou, 6),
        blank=missed.blank, energy_in_box=energy, peak_in_box=peak, overlay=str(each) if each else None,
    )  # fmt: skip


def box_pixels(box: Sequence[float], shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    """A box's pixels (x1, y1, x2, y2, ends exclusive): every pixel it covers at least partly, inside the picture."""
    height, width = shape[-2:]
    x1, y1 = max(0, int(np.floor(box[0]))), max(0, int(np.floor(box[1])))
    x2, y2 = min(width, max(x1 + 1, int(np.ceil(box[2])))), min(height, max(y1 + 1, int(np.ceil(box[3]))))
    return x1, y1, x2, y2


def in_box(cam: np.ndarray, box: Sequence[float]) -> tuple[float | None, bool | None]:
    """A map's two localisation figures for a box, as the records say them (and `gradcam eval` measures them): the share
    of its energy (its sum) in the box's pixels, and whether its peak (the first maximum, row-major) lies in them;
    None for both when the map is all zeros or the box covers none of its pixels."""
    total = float(cam.sum())
    x1, y1, x2, y2 = box_pixels(box, cam.shape)
    region = cam[y1:y2, x1:x2]
    if total <= 0 or region.size == 0:
        return None, None
    peak_y, peak_x = np.unravel_index(int(np.argmax(cam)), cam.shape)
    return round(float(region.sum()) / total, 6), bool(y1 <= peak_y < y2 and x1 <= peak_x < x2)


def _in_box(cam: np.ndarray, box: list[float]) -> tuple[np.ndarray | None, float | None, bool | None]:
    """The map inside its box renormalised there, the share of its energy in the box, and whether its peak is in it."""
    energy, peak = in_box(cam, box)
    if energy is None:
        return None, None, None
    x1, y1, x2, y2 = box_pixels(box, cam.shape)
    region = cam[y1:y2, x1:x2]
    low, high = float(region.min()), float(region.max())
    inside = (region - low) / (high - low) if high > low else np.zeros_like(region)
    return inside.astype(np.float32), energy, peak


def in_region(cam: np.ndarray, region: np.ndarray) -> tuple[float | None, bool | None]:
    """A map's two localisation figures for a region of pixels on the photo (a detection's mask, a segmenter's region),
    as `in_box` says them for a box: the share of its energy in the region, and whether its peak (the first maximum,
    row-major) lies in it; None for both when the map is all zeros or the region has no pixel."""
    total = float(cam.sum())
    if total <= 0 or not region.any():
        return None, None
    peak = np.unravel_index(int(np.argmax(cam)), cam.shape)
    return round(float(cam[region].sum()) / total, 6), bool(region[peak])


def _write_each(out: Pictures, image: np.ndarray, cam: np.ndarray, box: DrawnBox, path: Path, outline: DrawnRegion | None = None) -> Path:
    """One object's whole map with only its box (and its mask's outline)."""
    _write_picture(out, path, image, cam, [box], None, [] if outline is None else [outline])
    return path


def _write_picture(
    out: Pictures, path: Path, image: np.ndarray, shown: np.ndarray, boxes: list[DrawnBox], caption: str | None,
    outlines: list[DrawnRegion] | None = None,
) -> None:  # fmt: skip
    """The map in the run's style, the masks' outlines and then the boxes over it (the labels on top), the caption under
    it; stamped and written atomically."""
    rgb = draw(image, shown, style=out.style, colormap=out.colormap, alpha=out.alpha)
    rgb = draw_boxes(draw_outlines(rgb, outlines) if outlines else rgb, boxes)
    if caption:
        from gradcam_cli.outputs.picture import captioned

        rgb = captioned(rgb, caption, None, out.colormap)
    out.save(path, rgb)
    stamp("written")
