"""3-D volumes in (CT, MRI): a NIfTI file or a folder of one DICOM series → voxels, their affine and header.

The voxels stay in the file's own array order, never resampled, and the affine
maps them to NIfTI's RAS+ world in millimetres: a map computed on this array
and written with this affine and header (outputs/volume_files.py) lines up with
the scan voxel for voxel in any viewer (M3d-CAM's identity affine does not).
nibabel and pydicom are optional (the `volumes` extra), imported here only.
"""

from __future__ import annotations

import os
import stat
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gradcam_cli.errors import InputError, one_line
from gradcam_cli.inputs.extras import volume_library

NIFTI_SUFFIXES = (".nii", ".nii.gz")
PICK_ONE = "pick one volume first (fslroi IN OUT T 1, or nibabel.funcs.four_to_three)"


@dataclass(frozen=True, eq=False)
class Volume:
    """A scan as read: float32 voxels in the file's order, their affine (voxel → RAS+ mm) and what to write a map with.

    `header` is a nibabel Nifti1Header: the file's own for a NIfTI (its sform
    and qform codes, units), one made from the affine for a DICOM series.
    `spacing` is the voxel size along each array axis in mm.
    """

    data: np.ndarray
    affine: np.ndarray
    header: Any
    spacing: tuple[float, float, float]
    source: Path
    description: str
    modality: str | None = None

    @property
    def axcodes(self) -> tuple[str, str, str]:
        """Where each array axis points in the world (nibabel's aff2axcodes), e.g. ('L', 'P', 'S') for DICOM's order."""
        orientations = volume_library("nibabel.orientations", "orienting a volume")
        first, second, third = orientations.aff2axcodes(self.affine)
        return str(first), str(second), str(third)


def is_nifti(path: Path) -> bool:
    return path.name.lower().endswith(NIFTI_SUFFIXES)


def read_volume(path: Path | str) -> Volume:
    """A NIfTI file (.nii, .nii.gz) or a folder holding one DICOM series; any failure is one InputError line naming it."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise InputError(f"{path}: no such file or folder") from None
    except OSError as error:
        raise InputError(f"{path}: cannot read ({error.strerror or error})") from None
    if stat.S_ISDIR(mode):
        return _dicom_volume(path)
    if not stat.S_ISREG(mode):
        raise InputError(f"{path}: not a regular file or folder; a volume is a .nii/.nii.gz file or a folder of DICOM slices")
    if is_nifti(path):
        return read_nifti(path)
    raise InputError(f"{path}: not a volume", hint="give a .nii or .nii.gz file, or the folder of one DICOM series")


def read_nifti(path: Path) -> Volume:
    """A NIfTI-1 or -2 file: its voxels scaled as its header says (scl_slope/inter), a 4-D one with one volume squeezed."""
    nibabel = volume_library("nibabel", "reading NIfTI volumes")
    try:
        image = nibabel.load(str(path))
        if not isinstance(image, nibabel.Nifti1Image):
            raise InputError(f"{path}: a {type(image).__name__}, not a single-file NIfTI")
        data = np.asarray(image.get_fdata(dtype=np.float32))
    except InputError:
        raise
    except (OSError, ValueError, EOFError, zlib.error, nibabel.filebasedimages.ImageFileError) as error:
        raise InputError(
            f"{path}: cannot read this NIfTI file ({one_line(error) or type(error).__name__}): truncated or damaged?"
        ) from None
    data = _three_d(path, data)
    header = image.header.copy()
    return Volume(
        data=np.ascontiguousarray(data, dtype=np.float32),
        affine=np.asarray(image.affine, dtype=np.float64),
        header=header,
        spacing=_spacing(image.affine),
        source=path,
        description=_nifti_description(data, image.affine, header),
    )


def _three_d(path: Path, data: np.ndarray) -> np.ndarray:
    """3-D as it is; trailing axes of length 1 dropped; a real 4-D (a time series) refused with its shape."""
    shape = data.shape
    while data.ndim > 3 and data.shape[-1] == 1:
        data = data[..., 0]
    if data.ndim == 3 and min(data.shape) >= 1:
        return data
    size = "x".join(map(str, shape))
    if data.ndim < 3:
        raise InputError(f"{path}: a {data.ndim}-D NIfTI of shape {size}, not a volume", hint="explain it as an image instead")
    raise InputError(f"{path}: a {data.ndim}-D NIfTI of shape {size} (a time series or several volumes), not one volume", hint=PICK_ONE)


def _spacing(affine: np.ndarray) -> tuple[float, float, float]:
    affines = volume_library("nibabel.affines", "reading volumes")
    sizes = affines.voxel_sizes(affine)
    return float(sizes[0]), float(sizes[1]), float(sizes[2])


def _nifti_description(data: np.ndarray, affine: np.ndarray, header: Any) -> str:
    orientations = volume_library("nibabel.orientations", "reading volumes")
    spacing = "x".join(f"{v:.3g}" for v in _spacing(affine))
    note = one_line(bytes(header["descrip"].item()).decode("latin-1", "replace").strip("\0 "), 40)
    text = f"NIfTI {'x'.join(map(str, data.shape))} voxels of {spacing} mm, {''.join(orientations.aff2axcodes(affine))}"
    return f"{text} '{note}'" if note else text


def _dicom_volume(folder: Path) -> Volume:
    """A DICOM series with a NIfTI header made for it: its affine as sform and qform (code 1, scanner), millimetres."""
    from gradcam_cli.inputs.dicom_series import read_series

    series = read_series(folder)
    nibabel = volume_library("nibabel", "reading DICOM series")
    header = nibabel.Nifti1Header()
    header.set_data_shape(series.data.shape)
    header.set_data_dtype(np.float32)
    header.set_zooms(_spacing(series.affine))
    header.set_qform(series.affine, code=1)
    header.set_sform(series.affine, code=1)
    header.set_xyzt_units("mm", "sec")
    header["descrip"] = series.description[:79].encode("latin-1", "replace")
    return Volume(
        data=series.data,
        affine=series.affine,
        header=header,
        spacing=_spacing(series.affine),
        source=folder,
        description=f"{series.description}, {'x'.join(map(str, series.data.shape))} voxels",
        modality=series.modality,
    )
