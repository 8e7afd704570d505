"""A video frame's maps made into what its overlay video shows, and its record; nothing written here.

Runs in a worker thread, as the writer does for an image: the map put back on
the frame, the record built (the frame's index and time in it, the video as
its output). A classifier's frame keeps its map undrawn for the video to
smooth (outputs/video_files.MapSmoother); a detector's or segmenter's picture
is drawn by the image's own code (detection_files, segment_files), handed a
keeper that holds the picture instead of writing it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path, PurePath
from typing import TYPE_CHECKING

import numpy as np

from gradcam_cli.found import Segments
from gradcam_cli.geometry import Geometry, resize
from gradcam_cli.inputs.video import Clip, Frame
from gradcam_cli.inputs.volume_slices import WholeVolume
from gradcam_cli.outputs.detection_files import write_detections
from gradcam_cli.outputs.legend import display_scale
from gradcam_cli.outputs.records import ImageRecord
from gradcam_cli.outputs.render import photo_maps
from gradcam_cli.outputs.segment_files import write_segments
from gradcam_cli.outputs.video_files import FramePicture
from gradcam_cli.outputs.volume_segments import volume_regions
from gradcam_cli.outputs.writer import ResultWriter, caption_for, image_probabilities, image_record, target_record

if TYPE_CHECKING:
    from gradcam_cli.maps import CamBatch


class _Keeper:
    """The run's writer as a detector's or segmenter's picture code sees it, keeping the one picture in memory."""

    def __init__(self, writer: ResultWriter) -> None:
        self.namer, self.class_names, self.context = writer.namer, writer.class_names, writer.context
        self.colormap, self.alpha, self.style, self.caption = writer.colormap, writer.alpha, writer.style, writer.caption
        self.raw_norm = writer.raw_norm
        self.each = False  # a video shows one picture a frame
        self.picture: np.ndarray | None = None

    def save(self, path: Path, rgb: np.ndarray) -> None:
        self.picture = rgb

    def keep_map(self, which: str, cam: np.ndarray) -> None:
        """The video keeps no map of each object."""

    def keep_mask(self, which: str, mask: np.ndarray) -> None:
        """Nor its mask."""


def at_frame(record: ImageRecord, frame: Frame) -> ImageRecord:
    """The record of an image that is a video's frame (its index and time) or a volume's slice (its index)."""
    if frame.time is None:
        return replace(record, slice=frame.index)
    return replace(record, frame=frame.index, time=frame.time)


def frame_picture(
    writer: ResultWriter, path: Path, frame: Frame, geometry: Geometry, cams: CamBatch, row: int, base: PurePath,
    video: Path, raw: Path | None,
) -> FramePicture:  # fmt: skip
    """One explained frame: its record (frame, time, the video as its output) and its picture or map."""
    if not bool(cams.finite[row]):
        message = f"{path}: frame {frame.index}: the model's scores or gradients are not finite (NaN or inf); shown without a map"
        return FramePicture(at_frame(writer.error_record(path, message), frame), frame.image)
    if cams.found is not None:
        keeper = _Keeper(writer)
        write = write_segments if isinstance(cams.found[row], Segments) else write_detections
        record = write(keeper, path, frame.image, geometry, cams, row, base)
        return FramePicture(at_frame(replace(record, outputs=[str(video)]), frame), frame.image, drawn=keeper.picture)
    return _class_frame(writer, path, frame, geometry, cams, row, video, raw)


def clip_pictures(
    writer: ResultWriter, path: Path, clip: Clip, geometry: Geometry, cams: CamBatch, row: int, video: Path, raw: Path | None
) -> list[FramePicture]:
    """A video classifier's clip: each frame it shows with its own time slice of the clip's map (T, H, W), and the
    clip's class."""
    if not bool(cams.finite[row]):
        message = f"{path}: clip {clip.index}: the model's scores or gradients are not finite (NaN or inf); shown without a map"
        return [FramePicture(at_frame(writer.error_record(path, message), clip.frames[t]), clip.frames[t].image) for t in clip.shown]
    pictures = []
    for t in clip.shown:
        picture = _class_frame(writer, path, clip.frames[t], geometry, cams, row, video, raw, moment=t)
        picture.record = replace(picture.record, clip=clip.index)
        pictures.append(picture)
    return pictures


def volume_picture(writer: ResultWriter, path: Path, whole: WholeVolume, cams: CamBatch, row: int, picture: Path) -> FramePicture:
    """A volume a 3-D model read whole: its class, and its map (D, H, W) brought back to the scan's own shape (a 3-D
    segmenter's regions, each with its map: outputs/volume_segments.py; `picture` its labels volume)."""
    if not bool(cams.finite[row]):
        return FramePicture(writer.error_record(path, f"{path}: the model's scores or gradients are not finite (NaN or inf)"), whole.image)
    if cams.found is not None:
        return volume_regions(writer, path, whole, cams, row, picture)
    probabilities = image_probabilities(cams.logits[row], writer.kind)
    k = cams.ranks(row)[0]
    target = target_record(cams, row, k, probabilities, writer.class_names, overlay=str(picture))
    record = image_record(str(path), whole.image, [target], probabilities, writer.class_names, writer.context)
    cam = resize(cams.maps[row, k].float(), tuple(whole.scan.shape)).numpy()
    return FramePicture(replace(record, width=None, height=None), whole.image, shown=cam)


def _class_frame(
    writer: ResultWriter, path: Path, frame: Frame, geometry: Geometry, cams: CamBatch, row: int, video: Path, raw: Path | None,
    moment: int | None = None,
) -> FramePicture:  # fmt: skip
    """A classifier's (or a prompt's) frame: its one explained class, the map on the frame left undrawn (a clip's map at
    the frame's `moment` in it)."""
    probabilities = image_probabilities(cams.logits[row], writer.kind)
    k = cams.ranks(row)[0]
    target = target_record(cams, row, k, probabilities, writer.class_names, overlay=str(video), raw=str(raw) if raw is not None else None)
    record = at_frame(image_record(str(path), frame.image, [target], probabilities, writer.class_names, writer.context), frame)
    cam = cams.maps[row, k] if moment is None else cams.maps[row, k, moment]
    shown, kept = photo_maps(cam, geometry, raw_norm=writer.raw_norm, with_raw=raw is not None)
    caption = caption_for(target, writer.context, writer.kind) if writer.caption else None
    scale = display_scale(cam, writer.raw_norm) if caption else None
    return FramePicture(record, frame.image, shown=shown, raw=kept, caption=caption, scale=scale)
