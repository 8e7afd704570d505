"""A volume's map out: a NIfTI that lines up with the scan in any viewer, and a PNG montage to glance at.

The NIfTI keeps the scan's affine and header (spacing, sform and qform with
their codes, units), so it overlays the scan voxel for voxel in ITK-SNAP,
FSLeyes or 3D Slicer; only the data type (float32), the scaling (none: values
read as written) and the description change. The montage shows the three
orthogonal slices through the map's peak, each upright with the body's
proportions (inputs/volume_planes.py), the scan in grey under the map.
Both are written atomically (outputs/files.py).
"""

from __future__ import annotations

import gzip
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gradcam_cli.inputs.extras import volume_library
from gradcam_cli.inputs.volume_planes import (
    DISPLAY,
    Plane,
    from_plane_slices,
    plane_position,
    plane_slice,
    plane_spacing,
    plane_stack_shape,
)
from gradcam_cli.inputs.volumes import Volume
from gradcam_cli.outputs.files import write_atomic
from gradcam_cli.outputs.render import encode_png, overlay
from gradcam_cli.vocab import Colormap

MONTAGE_SIDE = 256  # px of the longest side of the three slices, in the body's millimetres
GAP = 6  # px between the slices
LABEL_TEXT, LABEL_BAND = 12, 18  # px: the plane's name in a band above its slice
OPPOSITE = {"L": "R", "R": "L", "A": "P", "P": "A", "S": "I", "I": "S"}


@dataclass(frozen=True)
class Peak:
    """The map's largest voxel: its index in the volume's order, its RAS+ position in mm, its value."""

    voxel: tuple[int, int, int]
    world: tuple[float, float, float]
    value: float

    def __str__(self) -> str:
        voxel = ",".join(map(str, self.voxel))
        world = ", ".join(f"{v:.1f}" for v in self.world)
        return f"peak {self.value:.3g} at voxel ({voxel}), RAS ({world}) mm"


@dataclass(frozen=True)
class Montage:
    """The montage's pixels, the peak it is centred on, and where the peak lies in each slice's panel (x, y)."""

    rgb: np.ndarray
    peak: Peak
    marks: dict[Plane, tuple[int, int]]


def map_peak(cam: np.ndarray, affine: np.ndarray) -> Peak:
    """The largest finite voxel of a map (the first, in the array's order, on a tie)."""
    affines = volume_library("nibabel.affines", "locating a volume's peak")
    values = np.where(np.isfinite(cam), cam, -np.inf)
    voxel = tuple(int(i) for i in np.unravel_index(int(np.argmax(values)), cam.shape))
    world = affines.apply_affine(affine, voxel)
    return Peak((voxel[0], voxel[1], voxel[2]), (float(world[0]), float(world[1]), float(world[2])), float(np.nan_to_num(cam[voxel])))


def nifti_map_bytes(cam: np.ndarray, volume: Volume, description: str = "gradcam map") -> bytes:
    """The map as an uncompressed NIfTI file: the scan's header and affine, float32, no scaling, its own description."""
    nibabel = volume_library("nibabel", "writing NIfTI maps")
    if cam.shape != volume.data.shape:
        raise ValueError(f"a map of shape {cam.shape} for a volume of shape {volume.data.shape}: put the slices' maps back first")
    header = volume.header.copy()
    kind = nibabel.Nifti2Image if isinstance(header, nibabel.Nifti2Header) else nibabel.Nifti1Image  # the scan's own version
    image = kind(np.asarray(cam, dtype=np.float32), volume.affine, header=header)
    image.set_data_dtype(np.float32)
    image.header.set_slope_inter(1.0, 0.0)  # read as written: the scan's own scaling (an int16 CT's) does not apply
    image.header["cal_min"], image.header["cal_max"] = 0.0, 0.0
    image.header["intent_code"] = 0
    image.header["descrip"] = description[:79].encode("latin-1", "replace")
    return bytes(image.to_bytes())


def write_map_nifti(path: Path, cam: np.ndarray, volume: Volume, description: str = "gradcam map") -> None:
    """Write the map (the scan's shape) as NIfTI at `path`, gzip-compressed when it ends in .gz; atomically."""
    data = nifti_map_bytes(cam, volume, description)
    write_atomic(path, gzip.compress(data, compresslevel=6, mtime=0) if path.name.lower().endswith(".gz") else data)


def montage(volume: Volume, cam: np.ndarray, scan: np.ndarray, colormap: Colormap = Colormap.jet, alpha: float = 0.5) -> Montage:
    """Axial, coronal and sagittal slices through the map's peak, side by side: `scan` (in [0, 1], e.g. scale_intensity's)
    in grey under the map (scaled by its peak), each upright with the body's proportions, its plane and orientation named,
    and the peak's voxel and world position under them."""
    from gradcam_cli.outputs.picture import captioned

    if cam.shape != volume.data.shape or scan.shape != volume.data.shape:
        raise ValueError(f"a map of shape {cam.shape} and a scan of {scan.shape} for a volume of shape {volume.data.shape}")
    peak = map_peak(cam, volume.affine)
    shown = np.clip(np.nan_to_num(cam) / peak.value, 0.0, 1.0) if peak.value > 0 else np.zeros(cam.shape, np.float32)
    extents = {plane: _extent_mm(volume, plane) for plane in Plane}
    mm_per_px = max(max(extent) for extent in extents.values()) / MONTAGE_SIDE
    panels, marks, left = [], {}, 0
    for plane in (Plane.axial, Plane.coronal, Plane.sagittal):
        index, row, column = plane_position(peak.voxel, volume.data.shape, volume.affine, plane)
        grey, heat = plane_slice(scan, volume.affine, plane, index), plane_slice(shown, volume.affine, plane, index)
        height, width = (max(1, round(mm / mm_per_px)) for mm in extents[plane])
        count = plane_stack_shape(volume.data.shape, volume.affine, plane)[0]
        panels.append(_panel(grey, heat, (width, height), plane, f"{plane.value} {index + 1}/{count}", colormap, alpha))
        marks[plane] = (left + int((column + 0.5) * width / grey.shape[1]), LABEL_BAND + int((row + 0.5) * height / grey.shape[0]))
        left += width + GAP
    tallest = max(panel.shape[0] for panel in panels)
    padded = [np.pad(p, ((0, tallest - p.shape[0]), (0, GAP if i < len(panels) - 1 else 0), (0, 0))) for i, p in enumerate(panels)]
    return Montage(captioned(np.concatenate(padded, axis=1), str(peak), colormap=colormap), peak, marks)


def write_montage(
    path: Path, volume: Volume, cam: np.ndarray, scan: np.ndarray, colormap: Colormap = Colormap.jet, alpha: float = 0.5
) -> Montage:
    """Write `montage`'s PNG at `path`, atomically; returns the montage (its peak for the record)."""
    drawn = montage(volume, cam, scan, colormap, alpha)
    write_atomic(path, encode_png(drawn.rgb))
    return drawn


def _extent_mm(volume: Volume, plane: Plane) -> tuple[float, float]:
    """Height and width in mm of the plane's slices."""
    _count, rows, columns = plane_stack_shape(volume.data.shape, volume.affine, plane)
    row_mm, column_mm = plane_spacing(volume.spacing, volume.affine, plane)
    return rows * row_mm, columns * column_mm


def _panel(
    grey: np.ndarray, heat: np.ndarray, size: tuple[int, int], plane: Plane, label: str, colormap: Colormap, alpha: float
) -> np.ndarray:
    """One slice at `size` (width, height) px: the map over the grey scan, the plane named in a band above, and the
    body's directions at the top and left edges (A, S, R...)."""
    import cv2
    from PIL import Image, ImageDraw

    from gradcam_cli.outputs.text import fitted, font

    levels = cv2.resize(np.clip(grey * 255.0 + 0.5, 0, 255).astype(np.uint8), size, interpolation=cv2.INTER_LINEAR)
    resized = cv2.resize(heat.astype(np.float32), size, interpolation=cv2.INTER_LINEAR)
    blended = overlay(np.repeat(levels[..., None], 3, axis=2), resized, colormap, alpha)
    picture = Image.new("RGB", (size[0], size[1] + LABEL_BAND), (24, 24, 24))
    picture.paste(Image.fromarray(blended), (0, LABEL_BAND))
    ink, face = ImageDraw.Draw(picture), font(LABEL_TEXT)
    ink.text((2, 2), fitted(label, face, size[0] - 4), fill=(255, 255, 255), font=face)
    _slices, down, right = DISPLAY[plane]
    ink.text((size[0] // 2, LABEL_BAND + 1), OPPOSITE[down], fill=(255, 255, 0), font=face, anchor="mt")
    ink.text((2, LABEL_BAND + size[1] // 2), OPPOSITE[right], fill=(255, 255, 0), font=face, anchor="lm")
    return np.asarray(picture)


class SliceMaps:
    """A volume's slice maps (⟨slices⟩) gathered in their plane's stack, then the map volume written: NIfTI with the
    scan's affine and header, then the montage through its peak, stamped (`stamped`), which stands for both."""

    def __init__(
        self, nifti: Path, picture: Path, volume: Volume, scan: np.ndarray, plane: Plane, stamped: Callable[[bytes], bytes], *,
        colormap: Colormap = Colormap.jet, alpha: float = 0.5,
    ) -> None:  # fmt: skip
        self.nifti, self.picture, self.volume, self.scan, self.plane = nifti, picture, volume, scan, Plane(plane)
        self.stamped, self.colormap, self.alpha = stamped, colormap, alpha
        self.stack = np.zeros(plane_stack_shape(volume.data.shape, volume.affine, self.plane), np.float32)

    def add(self, index: int, shown: np.ndarray | None) -> None:
        """One slice's map on the slice (None: its map failed, and stays 0)."""
        if shown is not None:
            self.stack[index] = shown

    def finish(self) -> Peak:
        cam = from_plane_slices(self.stack, self.volume.affine, self.plane, self.volume.data.shape)
        return write_map_volume(self.nifti, self.picture, self.volume, cam, self.scan, self.stamped, self.colormap, self.alpha)

    def abort(self) -> None:
        """Nothing is written before `finish`: nothing to remove."""


def write_map_volume(
    nifti: Path, picture: Path, volume: Volume, cam: np.ndarray, scan: np.ndarray, stamped: Callable[[bytes], bytes],
    colormap: Colormap = Colormap.jet, alpha: float = 0.5,
) -> Peak:  # fmt: skip
    """A volume's map written: NIfTI with the scan's affine and header, then the montage through its peak, stamped (last:
    its stamp stands for the NIfTI beside it)."""
    write_map_nifti(nifti, cam, volume)
    drawn = montage(volume, cam, scan, colormap, alpha)
    write_atomic(picture, stamped(encode_png(drawn.rgb)))
    return drawn.peak
