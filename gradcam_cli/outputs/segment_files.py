"""A segmenter's files and record: every explained region over its own map, outlined; one overlay per region with ⟨each⟩.

The picture of an image shows each region's map inside the region,
renormalised there (a faint class's evidence is as visible as a strong one's),
each region outlined in its colour with its class and share of the photo; a
missed region (truth says the class, the model another) dashed. `--each` adds
`NAME.EXT.METHOD.segN.png` (`.missN.png`): the region's whole map with only
its outline, so the evidence it draws from outside the region shows too. The
record lists each region with its area, the class's mean probability in it,
its map's share of energy inside it and, with truth, the class's IoU and Dice.
Maps are put back on the photo one at a time, so memory holds one map.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path, PurePath
from typing import TYPE_CHECKING

import numpy as np

from gradcam_cli.found import Segment, Segments
from gradcam_cli.geometry import Geometry, labels_to_original
from gradcam_cli.outputs.detection_files import Pictures, detection_path, in_region, on_photo
from gradcam_cli.outputs.outlines import DrawnRegion, draw_outlines
from gradcam_cli.outputs.picture import draw
from gradcam_cli.outputs.records import ImageRecord, OverlapRecord, SegmentRecord, class_name
from gradcam_cli.timings import stamp

if TYPE_CHECKING:
    from gradcam_cli.maps import CamBatch


def write_segments(
    out: Pictures, path: Path, image: np.ndarray, geometry: Geometry, cams: CamBatch, row: int, base: PurePath
) -> ImageRecord:
    """This image's picture (and with ⟨each⟩ one per region) and its record."""
    assert cams.found is not None
    found: Segments = cams.found[row]
    overlap = _overlap(found, geometry, out.class_names)
    by_class = {one.class_index: one for one in overlap or []}
    shown = np.zeros(image.shape[:2], np.float32)
    outlines, records, missed_seen = [], [], 0
    for k in cams.ranks(row):
        segment = found.segments[k]
        region = labels_to_original(segment.region.numpy(), geometry, fill=False)
        cam = on_photo(out, cams.maps[row, k], geometry)
        which = f"miss{missed_seen}" if segment.kind == "missed" else f"seg{k}"
        missed_seen += segment.kind == "missed"
        out.keep_map(which, cam)
        drawn = DrawnRegion(region, _label(out, segment, region), k, dashed=segment.kind == "missed")
        energy = _paint(shown, cam, region)
        each = _write_picture(out, detection_path(out.namer, base, which), image, cam, [drawn], None) if out.each else None
        records.append(_record(out, k, segment, region, bool(cams.blank[row, k]), energy, by_class.get(segment.class_index), each))
        outlines.append(drawn)
    caption = None
    if out.caption:
        caption = f"{len(records)} region{'s' * (len(records) != 1)}  {out.context['method']} @ {', '.join(out.context['layers'])}"
    picture, _, _ = out.namer.paths(base, None, False)
    _write_picture(out, picture, image, shown, outlines, caption)
    written = [r.overlay for r in records if r.overlay]
    return ImageRecord(
        input=str(path), ok=True, width=int(image.shape[1]), height=int(image.shape[0]), outputs=[str(picture), *written],
        segments=records, overlap=overlap, **out.context,
    )  # fmt: skip


def _label(out: Pictures, segment: Segment, region: np.ndarray) -> str:
    """`cat 12.5%` (the region's share of the photo); a missed region says so."""
    name = class_name(out.class_names, segment.class_index) or f"class {segment.class_index}"
    share = 100.0 * float(region.mean()) if region.size else 0.0
    return f"{'missed ' if segment.kind == 'missed' else ''}{name} {share:.1f}%"


def _paint(shown: np.ndarray, cam: np.ndarray, region: np.ndarray) -> float | None:
    """The map inside its region, renormalised there, onto the picture (the brighter where regions overlap); the share
    of the map's energy inside the region (None: a blank map, or a region with no pixel on the photo)."""
    energy, _ = in_region(cam, region)
    if energy is None:
        return None
    inside = cam[region]
    low, high = float(inside.min()), float(inside.max())
    scaled = (inside - low) / (high - low) if high > low else np.zeros_like(inside)
    shown[region] = np.maximum(shown[region], scaled.astype(np.float32))
    return energy


def _overlap(found: Segments, geometry: Geometry, names: Sequence[str] | None) -> list[OverlapRecord] | None:
    """With a true mask, every class the truth or the model gives a pixel: IoU, Dice, areas, over the photo (the
    predicted labels put back on it only then)."""
    if found.truth is None:
        return None
    labels = labels_to_original(found.labels.numpy(), geometry, fill=-1)
    from gradcam_cli.evaluate.overlap import class_overlap  # only with truth: a run without it never loads evaluate/

    present = {int(c) for c in np.unique(labels) if c >= 0} | {int(c) for c in np.unique(found.truth) if c >= 0}
    figures = class_overlap(labels, found.truth, sorted(present))
    return [
        OverlapRecord(
            class_index=c,
            class_name=class_name(names, c),
            iou=None if f.iou is None else round(f.iou, 6),
            dice=None if f.dice is None else round(f.dice, 6),
            true_area=int(f.true_area),
            predicted_area=int(f.predicted_area),
            missed_area=int(f.missed_area),
        )  # fmt: skip
        for c, f in sorted(figures.items())
    ]


def _record(
    out: Pictures, rank: int, segment: Segment, region: np.ndarray, blank: bool, energy: float | None,
    overlap: OverlapRecord | None, each: Path | None,
) -> SegmentRecord:  # fmt: skip
    area = int(region.sum())
    return SegmentRecord(
        rank=rank, class_index=segment.class_index, class_name=class_name(out.class_names, segment.class_index),
        region=segment.kind, area=area, area_fraction=round(area / max(1, region.size), 6), score=round(segment.score, 6),
        mean_probability=round(segment.mean_probability, 6), blank=blank, energy_in_region=energy,
        iou=None if overlap is None else overlap.iou, dice=None if overlap is None else overlap.dice,
        missed_area=None if overlap is None else overlap.missed_area, overlay=str(each) if each else None,
    )  # fmt: skip


def _write_picture(
    out: Pictures, path: Path, image: np.ndarray, shown: np.ndarray, regions: list[DrawnRegion], caption: str | None
) -> Path:
    """The map in the run's style, the outlines over it, the caption under it; stamped and written atomically."""
    rgb = draw_outlines(draw(image, shown, style=out.style, colormap=out.colormap, alpha=out.alpha), regions)
    if caption:
        from gradcam_cli.outputs.picture import captioned

        rgb = captioned(rgb, caption, None, out.colormap)
    out.save(path, rgb)
    stamp("written")
    return path
