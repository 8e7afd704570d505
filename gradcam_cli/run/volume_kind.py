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
from gradcam_cli.outputs.writer import ResultWriter
from gradcam_cli.run.batches import Item
from gradcam_cli.run.sequences import Opened, RunShape, SequenceJob
from gradcam_cli.run.slices_kind import volume_complete, volume_outputs
from gradcam_cli.values import Window


class VolumeSink:
    """A volume's one map, written when its end comes."""

    def __init__(self, nifti: Path, montage: Path, opened: VolumeWhole, writer: ResultWriter) -> None:
        self.nifti, self.montage, self.opened, self.writer = nifti, montage, opened, writer
        self.cam: np.ndarray | None = None

    def add(self, picture: FramePicture) -> None:
        self.cam = picture.shown

    def finish(self) -> None:
        if self.cam is None:  # its map failed: its record says why, nothing is written
            return
        volume: Volume = self.opened.volume
        writer = self.writer
        write_map_volume(self.nifti, self.montage, volume, self.cam, self.opened.scan, writer.stamped, writer.colormap, writer.alpha)

    def abort(self) -> None:
        """Nothing is written before `finish`."""


class VolumeKind:
    """NIfTI files and DICOM series folders for a 3-D model: `NAME.METHOD.nii.gz` and the montage `NAME.METHOD.png`."""

    def __init__(self, writer: ResultWriter, window: Window | None, channels: int) -> None:
        self.writer, self.window, self.channels = writer, window, channels

    def accepts(self, path: Path) -> bool:
        return is_volume(path)

    def refusal(self, run: RunShape) -> str | None:
        """Why this run cannot explain a volume whole, as each volume's one line; None when it can."""
        if run.clip_length is None:
            return (
                "a volume: give ⟨slices⟩ (axial, coronal or sagittal) to explain it slice by slice with a 2-D model, or "
                "a 3-D model's ⟨input_size⟩ DxHxW"
            )
        if not run.one_map or run.several_maps:
            return "a volume's map explains one class of a classifier (the top one, or one ⟨classes⟩)"
        if run.settings.outputs.save_guided or run.settings.outputs.each:
            return "⟨save_guided⟩ and ⟨each⟩ do not apply to volumes"
        return None

    def outputs(self, item: Item) -> list[Path]:
        return volume_outputs(self.writer, item)

    def complete(self, outputs: list[Path]) -> bool:
        return volume_complete(outputs)

    def open(self, item: Item, outputs: list[Path]) -> tuple[Opened, SequenceJob]:
        opened = VolumeWhole(item.source.path, self.window, self.channels)
        nifti, montage = outputs
        return opened, SequenceJob(montage, lambda: VolumeSink(nifti, montage, opened, self.writer), intensity=opened.intensity)
