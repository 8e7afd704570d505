"""explain() on a detector: each kept detection's map and overlay, and the picture of all, nothing written.

The pictures and records are made by the CLI writer's own code
(outputs/detection_files.py), handed an in-memory keeper instead of the run's
writer, so a notebook sees exactly what `gradcam explain --each` would write.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

import numpy as np

from gradcam_cli.api_results import Explanation, ObjectMap
from gradcam_cli.geometry import Geometry
from gradcam_cli.maps import CamBatch
from gradcam_cli.outputs.detection_files import detection_path, write_detections
from gradcam_cli.outputs.naming import OutputNamer
from gradcam_cli.outputs.provenance import stamp_for
from gradcam_cli.outputs.records import DetectionRecord, MissedRecord
from gradcam_cli.run.prepare import PreparedRun
from gradcam_cli.vocab import Norm

if TYPE_CHECKING:
    from PIL import Image


class Kept:
    """The pictures and maps a detector's image would write, kept in memory by name."""

    def __init__(self, run: PreparedRun, context: dict[str, Any]) -> None:
        outputs = run.settings.outputs
        self.namer = OutputNamer(Path("."), run.method.name)
        self.class_names: Sequence[str] | None = run.loaded.class_names
        self.context = context
        self.colormap, self.alpha, self.style, self.caption = outputs.colormap, outputs.alpha, outputs.style, outputs.caption
        self.raw_norm = run.settings.maps.norm is not Norm.minmax
        self.each = True  # every object's own overlay
        self.pictures: dict[str, Image.Image] = {}
        self.maps: dict[str, np.ndarray] = {}
        self.masks: dict[str, np.ndarray] = {}

    def save(self, path: Path, rgb: np.ndarray) -> None:
        from PIL import Image

        self.pictures[path.name] = Image.fromarray(rgb)

    @staticmethod
    def of(run: PreparedRun, name: str) -> tuple[Kept, PurePath]:
        """The keeper of one image's pictures, stamped as the CLI's would be, and the base of their names."""
        context = run.record_context()
        context["stamp"] = stamp_for(context)
        return Kept(run, context), PurePath(Path(name).name or "image")

    def picture(self, base: PurePath) -> Image.Image:
        """The image's picture of every object."""
        return self.pictures[self.namer.paths(base, None, False)[0].name]

    def keep_map(self, which: str, cam: np.ndarray) -> None:
        cam.flags.writeable = False
        self.maps[which] = cam

    def keep_mask(self, which: str, mask: np.ndarray) -> None:
        mask.flags.writeable = False
        self.masks[which] = mask


def detection_explanation(run: PreparedRun, name: str, photo: np.ndarray, geometry: Geometry, cams: CamBatch) -> Explanation:
    """The image's detections (and with truth its misses), each with its map and overlay, and the picture of all."""
    kept, base = Kept.of(run, name)
    record = write_detections(kept, Path(name), photo, geometry, cams, 0, base)
    picture = kept.picture(base)
    detections = tuple(_object(kept, base, f"det{d.rank}", d) for d in record.detections or [])
    missed = None if record.missed is None else tuple(_object(kept, base, f"miss{m.rank}", m) for m in record.missed)
    bare = replace(
        record, outputs=[], detections=[replace(d, overlay=None) for d in record.detections or []],
        missed=None if record.missed is None else [replace(m, overlay=None) for m in record.missed],
    )  # fmt: skip
    image = np.array(photo)
    image.flags.writeable = False
    return Explanation((), bare, image, geometry, detections=detections, missed=missed, picture=picture)


def _object(kept: Kept, base: PurePath, which: str, entry: DetectionRecord | MissedRecord) -> ObjectMap:
    """One object of the record, with the map and overlay kept for it."""
    score = entry.score if isinstance(entry, DetectionRecord) else entry.candidate_score
    overlay = kept.pictures.get(detection_path(kept.namer, base, which).name)
    return ObjectMap(
        tuple(entry.box), entry.class_index, entry.class_name, score, kept.maps.get(which), overlay,  # type: ignore[arg-type]
        replace(entry, overlay=None), kept.masks.get(which),
    )  # fmt: skip
