"""A volume opened for a 2-D model (⟨slices⟩): its slices of one plane, upright, as the 8-bit pictures a 2-D model reads.

The volume is read whole (nibabel and pydicom read it so), its intensities
scaled once over the whole volume (a CT window, or percentiles: each slice on
the same scale), then handed on a slice at a time as grey RGB pictures, each
upright as a viewer shows it (inputs/volume_planes.py). A slice has an index
and no time: its frame says so (`Frame.time` None).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from gradcam_cli.inputs.video import Frame
from gradcam_cli.inputs.volume_intensity import Window, scale_intensity
from gradcam_cli.inputs.volume_planes import plane_slices
from gradcam_cli.inputs.volumes import NIFTI_SUFFIXES, Volume, is_nifti, read_volume
from gradcam_cli.vocab import Plane

DICOM_SUFFIX = ".dcm"

__all__ = ["DICOM_SUFFIX", "NIFTI_SUFFIXES", "VolumeSlices", "is_volume"]


def is_volume(path: Path) -> bool:
    """A NIfTI file, or a folder of DICOM slices (`.dcm` files) as the source scanner hands it on."""
    return is_nifti(path) or path.is_dir()


class VolumeSlices:
    """One volume, read and scaled: its upright slices of `plane` as grey pictures, and how its intensities were scaled."""

    def __init__(self, path: Path, plane: Plane, window: Window | None) -> None:
        self.volume: Volume = read_volume(path)
        self.scan, self.intensity = scale_intensity(self.volume.data, window)
        self.plane = Plane(plane)

    def frames(self) -> Iterator[Frame]:
        """Each slice in order: (rows, columns, 3) uint8, the scaled intensities in grey."""
        stack = plane_slices(self.scan, self.volume.affine, self.plane)
        for index, grey in enumerate(stack):
            levels = np.clip(grey * 255.0 + 0.5, 0, 255).astype(np.uint8)
            yield Frame(index, None, np.ascontiguousarray(np.repeat(levels[..., None], 3, axis=2)))

    def __enter__(self) -> VolumeSlices:
        return self

    def __exit__(self, *exc: object) -> None:
        """Nothing held open: nibabel and pydicom read the files whole."""
