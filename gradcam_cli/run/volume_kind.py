"""Volumes as a kind of input (run/sequences.py), for a 3-D model: the whole volume in, its map volume out as NIfTI with
the scan's affine and header, and a montage through the map's peak.

The scaled voxels go to the model in the file's own array order, as MONAI's
NIfTI loader hands them on (channel first: (C, X, Y, Z)), resized to the model's
input (⟨input_size⟩ DxHxW) and repeated over the channels its first Conv3d
reads; the map comes back to the scan's own shape, so it lies on the voxels
it was computed from.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gradcam_cli.inputs.volume_slices import VolumeWhole, is_volume
from gradcam_cli.outputs.video_files import FramePicture
from gradcam_cli.outputs.volume_files import Volume, write_map_volume
from gradcam_cli.outputs.volume_segments import RegionsPicture, segment_outputs, write_regions
from gradcam_cli.outputs.writer import ResultWriter
from gradcam_cli.run.batches import Item
from gradcam_cli.run.sequences import Opened, RunShape, SequenceJob
from gradcam_cli.run.slices_kind import volume_complete, volume_outputs
from gradcam_cli.values import Window


class VolumeSink:
    """A volume's one map (a 3-D segmenter's: its regions' maps and labels, `nifti` the labels), written when its end
    comes."""

    def __init__(self, nifti: Path, montage: Path, opened: VolumeWhole, writer: ResultWriter) -> None:
        self.nifti, self.montage, self.opened, self.writer = nifti, montage, opened, writer
        self.cam: np.ndarray | None = None
        self.regions: RegionsPicture | None = None

    def add(self, picture: FramePicture) -> None:
        self.cam = picture.shown
        self.regions = picture if isinstance(picture, RegionsPicture) else None

    def finish(self) -> None:
        volume: Volume = self.opened.volume
        writer = self.writer
        if self.regions is not None:
            write_regions(self.nifti, self.regions, volume, self.opened.scan, writer.stamped, writer.colormap, writer.alpha)
        if self.cam is None:  # its map failed: its record says why, nothing is written
            return
        write_map_volume(self.nifti, self.montage, volume, self.cam, self.opened.scan, writer.stamped, writer.colormap, writer.alpha)

    def abort(self) -> None:
        """Nothing is written before `finish`."""


class VolumeKind:
    """NIfTI files and DICOM series folders for a 3-D model: `NAME.METHOD.nii.gz` and the montage `NAME.METHOD.png`; a
    3-D segmenter's (`segments`) per region `NAME.METHOD.segK.nii.gz` and `.segK.png`, and `NAME.METHOD.labels.nii.gz`."""

    def __init__(self, writer: ResultWriter, window: Window | None, channels: int, segments: bool = False) -> None:
        self.writer, self.window, self.channels, self.segments = writer, window, channels, segments

    def accepts(self, path: Path) -> bool:
        return is_volume(path)

    def refusal(self, run: RunShape) -> str | None:
        """Why this run cannot explain a volume whole, as each volume's one line; None when it can."""
        if run.clip_length is None:
            return (
                "a volume: give ⟨slices⟩ (axial, coronal or sagittal) to explain it slice by slice with a 2-D model, or "
                "a 3-D model's ⟨input_size⟩ DxHxW"
            )
        if self.segments:
            return _segments_refusal(run)
        if not run.one_map or run.several_maps:
            return "a volume's map explains one class of a classifier (the top one, or one ⟨classes⟩)"
        if run.settings.outputs.save_guided or run.settings.outputs.each:
            return "⟨save_guided⟩ and ⟨each⟩ do not apply to volumes"
        return None

    def outputs(self, item: Item) -> list[Path]:
        outputs = volume_outputs(self.writer, item)
        return segment_outputs(outputs[-1]) if self.segments else outputs

    def complete(self, outputs: list[Path]) -> bool:
        return volume_complete(outputs)

    def open(self, item: Item, outputs: list[Path]) -> tuple[Opened, SequenceJob]:
        opened = VolumeWhole(item.source.path, self.window, self.channels)
        nifti, montage = outputs  # a segmenter's: its labels, and its first region's montage
        return opened, SequenceJob(
            nifti if self.segments else montage, lambda: VolumeSink(nifti, montage, opened, self.writer), intensity=opened.intensity
        )


def _segments_refusal(run: RunShape) -> str | None:
    """What a 3-D segmenter's volume cannot take yet: a truth or a named region is an image's."""
    inputs, target = run.settings.inputs, run.settings.target
    if inputs.truth is not None:
        return "⟨truth⟩'s masks are images'; a volume's regions are the 3-D segmenter's predicted ones (leave ⟨truth⟩ out)"
    if target.region not in (None, "predicted") or target.mask is not None:
        return "⟨region⟩ and ⟨mask⟩ name a region of an image; a volume's regions are the 3-D segmenter's predicted ones"
    if run.settings.outputs.each:
        return "⟨each⟩ does not apply to volumes: each region's map is its own NIfTI and montage already"
    return None
