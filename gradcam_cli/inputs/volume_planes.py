"""A volume's planes: which array axis is axial, coronal or sagittal, its slices upright, and maps put back.

A 2-D model explains a volume slice by slice; it must see each slice as a
radiologist does (the patient upright: anterior up on an axial slice, superior
up on coronal and sagittal ones; the patient's right on the left, as scanner
consoles show it), whatever order the file stores its axes in (DICOM's LPS,
NIfTI's RAS, a coronal acquisition). The reorientation is nibabel's own
(io_orientation, ornt_transform, apply_orientation): only transposes and flips,
so the maps of the slices put back (`from_plane_slices`) land on exactly the
voxels they were computed on, and the map volume has the scan's shape and affine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from gradcam_cli.inputs.extras import volume_library
from gradcam_cli.vocab import Plane


__all__ = ["DISPLAY", "Plane", "from_plane_slices", "plane_axes", "plane_slice", "plane_slices", "plane_stack_shape"]


# Each plane's stack in nibabel's axis codes (the way each axis's index grows): slices, rows top to bottom, columns
# left to right. Rows toward P or I: anterior or superior up; columns toward L: the patient's right on the left
# (radiological); a sagittal slice has anterior on the left.
DISPLAY: dict[Plane, tuple[str, str, str]] = {
    Plane.axial: ("S", "P", "L"),
    Plane.coronal: ("A", "I", "L"),
    Plane.sagittal: ("R", "I", "P"),
}
NORMAL = {Plane.sagittal: 0, Plane.coronal: 1, Plane.axial: 2}  # the RAS world axis each plane is perpendicular to


def _orientations() -> Any:
    return volume_library("nibabel.orientations", "slicing a volume by plane")


def _to_display(affine: np.ndarray, plane: Plane) -> np.ndarray:
    """nibabel's transform from the volume's array order to the plane's stack (slices, rows, columns)."""
    orientations = _orientations()
    return orientations.ornt_transform(orientations.io_orientation(affine), orientations.axcodes2ornt(DISPLAY[Plane(plane)]))


def plane_axes(affine: np.ndarray) -> dict[Plane, int]:
    """The array axis each plane's slices are taken along (the axis closest to the plane's normal in the world)."""
    ornt = _orientations().io_orientation(affine)
    return {plane: int(np.flatnonzero(ornt[:, 0] == world)[0]) for plane, world in NORMAL.items()}


def plane_slices(data: np.ndarray, affine: np.ndarray, plane: Plane) -> np.ndarray:
    """The volume as a stack of upright 2-D slices of `plane`: (slices, rows, columns), a contiguous copy."""
    if data.ndim != 3:
        raise ValueError(f"a volume is 3-D, not of shape {data.shape}")
    return np.ascontiguousarray(_orientations().apply_orientation(data, _to_display(affine, plane)))


def plane_stack_shape(shape: Sequence[int], affine: np.ndarray, plane: Plane) -> tuple[int, int, int]:
    """The shape `plane_slices` gives for a volume of `shape`: the size each slice's map must have to go back."""
    transform = _to_display(affine, plane)
    stacked = [0, 0, 0]
    for axis, (to, _flip) in enumerate(transform):
        stacked[int(to)] = int(shape[axis])
    return stacked[0], stacked[1], stacked[2]


def from_plane_slices(stack: np.ndarray, affine: np.ndarray, plane: Plane, shape: Sequence[int]) -> np.ndarray:
    """Maps of a plane's slices (slices, rows, columns), one per slice, back in the volume's own order and `shape`."""
    expected = plane_stack_shape(shape, affine, plane)
    if tuple(stack.shape) != expected:
        raise ValueError(f"the {Plane(plane).value} maps are {stack.shape}, the volume's slices {expected}: resize each map first")
    orientations = _orientations()
    back = orientations.ornt_transform(orientations.axcodes2ornt(DISPLAY[Plane(plane)]), orientations.io_orientation(affine))
    return np.ascontiguousarray(orientations.apply_orientation(stack, back))


def plane_spacing(spacing: Sequence[float], affine: np.ndarray, plane: Plane) -> tuple[float, float]:
    """The height and width in mm of one pixel of the plane's slices: for a picture with the body's proportions."""
    transform = _to_display(affine, plane)
    sizes = {int(to): float(spacing[axis]) for axis, (to, _flip) in enumerate(transform)}
    return sizes[1], sizes[2]


def plane_position(voxel: Sequence[int], shape: Sequence[int], affine: np.ndarray, plane: Plane) -> tuple[int, int, int]:
    """Where a voxel (in the volume's order) lies in the plane's stack: (slice, row, column)."""
    transform = _to_display(affine, plane)
    where = [0, 0, 0]
    for axis, (to, flip) in enumerate(transform):
        index = int(voxel[axis])
        where[int(to)] = index if flip > 0 else int(shape[axis]) - 1 - index
    return where[0], where[1], where[2]


def plane_slice(data: np.ndarray, affine: np.ndarray, plane: Plane, index: int) -> np.ndarray:
    """One upright slice of `plane` (rows, columns), without copying the rest of the volume."""
    return np.array(_orientations().apply_orientation(data, _to_display(affine, plane))[index])
