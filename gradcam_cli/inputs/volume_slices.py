"""A volume opened for a 2-D model (⟨slices⟩): its slices of one plane, upright, as the 8-bit pictures a 2-D model reads;
or whole, for a 3-D model.

The volume is read whole (nibabel and pydicom read it so), its intensities
scaled once over the whole volume (a CT window, or percentiles: each slice on
the same scale), then handed on a slice at a time as grey RGB pictures, each
upright as a viewer shows it (inputs/volume_planes.py). A slice has an index
and no time: its frame says so (`Frame.time` None).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gradcam_cli.inputs.video import Frame
from gradcam_cli.inputs.volume_intensity import Window, scale_intensity
from gradcam_cli.inputs.volume_planes import plane_slices
from gradcam_cli.inputs.volumes import NIFTI_SUFFIXES, Volume, is_nifti, read_volume
from gradcam_cli.vocab import Plane

DICOM_SUFFIX = ".dcm"

__all__ = ["DICOM_SUFFIX", "NIFTI_SUFFIXES", "VolumeSlices", "VolumeWhole", "WholeVolume", "is_volume"]


def is_volume(path: Path) -> bool:
    """A NIfTI file, or a folder of DICOM slices (`.dcm` files) as the source scanner hands it on."""
    return is_nifti(path) or path.is_dir()


def grey_picture(scaled: np.ndarray) -> np.ndarray:
    """A slice scaled to [0, 1] as the 8-bit grey RGB picture an image model reads, (rows, columns, 3) uint8."""
    levels = np.clip(scaled * 255.0 + 0.5, 0, 255).astype(np.uint8)
    return np.ascontiguousarray(np.repeat(levels[..., None], 3, axis=2))


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
            yield Frame(index, None, grey_picture(grey))

    def __enter__(self) -> VolumeSlices:
        return self

    def __exit__(self, *exc: object) -> None:
        """Nothing held open: nibabel and pydicom read the files whole."""


@dataclass(frozen=True)
class WholeVolume:
    """A volume given whole to a 3-D model: its scaled voxels (file order, in [0, 1]); `image` its middle slice in grey,
    the one picture an image's code reads of it."""

    index: int
    scan: np.ndarray
    image: np.ndarray
    channels: int  # the channels the model reads: the voxels repeated over them

    def model_array(self, size: tuple[int, ...], mean: tuple[float, ...], std: tuple[float, ...]) -> np.ndarray:
        """The volume as its 3-D model reads it: (C, D, H, W) at the model's input size (trilinear), normalised."""
        import torch

        from gradcam_cli.geometry import resize

        voxels = resize(torch.from_numpy(np.ascontiguousarray(self.scan, dtype=np.float32)), tuple(size))
        channels = voxels.expand(self.channels, *voxels.shape)
        shift = torch.tensor(mean[: self.channels], dtype=torch.float32).view(-1, 1, 1, 1)
        scale = torch.tensor(std[: self.channels], dtype=torch.float32).view(-1, 1, 1, 1)
        return ((channels - shift) / scale).numpy()


class VolumeWhole:
    """One volume, read and scaled for a 3-D model: one picture, the whole volume."""

    def __init__(self, path: Path, window: Window | None, channels: int) -> None:
        self.volume: Volume = read_volume(path)
        self.scan, self.intensity = scale_intensity(self.volume.data, window)
        self.channels = channels

    def frames(self) -> Iterator[WholeVolume]:
        middle = self.scan[:, :, self.scan.shape[2] // 2]
        yield WholeVolume(0, self.scan, grey_picture(middle), self.channels)

    def __enter__(self) -> VolumeWhole:
        return self

    def __exit__(self, *exc: object) -> None:
        """Nothing held open."""
