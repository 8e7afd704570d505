"""explain() on a segmenter: each region's map and overlay, and the picture of all, nothing written.

The pictures and records come from the CLI writer's own code
(outputs/segment_files.py), handed the in-memory keeper explain() gives a
detector's (api_detections.Kept), so a notebook sees what `gradcam explain
--each` would write.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from gradcam_cli.api_detections import Kept
from gradcam_cli.api_results import Explanation, RegionMap
from gradcam_cli.found import Segments
from gradcam_cli.geometry import Geometry, labels_to_original
from gradcam_cli.maps import CamBatch
from gradcam_cli.outputs.detection_files import detection_path
from gradcam_cli.outputs.segment_files import write_segments
from gradcam_cli.run.prepare import PreparedRun


def segment_explanation(run: PreparedRun, name: str, photo: np.ndarray, geometry: Geometry, cams: CamBatch) -> Explanation:
    """The image's regions (with truth its missed ones), each with its pixels, map and overlay, and the picture of all."""
    kept, base = Kept.of(run, name)
    record = write_segments(kept, Path(name), photo, geometry, cams, 0, base)
    picture = kept.picture(base)
    assert cams.found is not None
    found: Segments = cams.found[0]
    regions, missed = [], 0
    for entry in record.segments or []:
        which = f"miss{missed}" if entry.region == "missed" else f"seg{entry.rank}"
        missed += entry.region == "missed"
        pixels = labels_to_original(found.segments[entry.rank].region.numpy(), geometry, fill=False)
        pixels.flags.writeable = False
        overlay = kept.pictures.get(detection_path(kept.namer, base, which).name)
        regions.append(
            RegionMap(entry.class_index, entry.class_name, entry.region, pixels, kept.maps[which], overlay, replace(entry, overlay=None))
        )
    bare = replace(record, outputs=[], segments=[replace(s, overlay=None) for s in record.segments or []])
    image = np.array(photo)
    image.flags.writeable = False
    return Explanation((), bare, image, geometry, segments=tuple(regions), picture=picture)
