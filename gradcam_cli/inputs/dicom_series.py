"""A DICOM series in: one folder of one series' slices → voxels in the modality's units and their RAS+ affine.

Slices are sorted along their normal by ImagePositionPatient, never by file
name (scanners and archives name files in any order); the affine comes from
ImageOrientationPatient, PixelSpacing and the first and last positions, turned
from DICOM's LPS world into NIfTI's RAS+ (x and y negated), so a map written
as NIfTI later lines up with the scan in any viewer. Intensities go through
the modality LUT (RescaleSlope/Intercept: Hounsfield units for CT). Anything
that would make the affine wrong (several series, a missing slice, mixed
sizes or orientations) is refused with one line naming the folder.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gradcam_cli.errors import InputError, one_line
from gradcam_cli.inputs.extras import volume_library

LPS_TO_RAS = np.diag([-1.0, -1.0, 1.0, 1.0])
SPACING_TOLERANCE = 0.1  # a step 10% off the series' own is no rounding of written positions: a slice is missing there
COUNTS = {"ImagePositionPatient": 3, "ImageOrientationPatient": 6, "PixelSpacing": 2}  # Rows, Columns: 1
ONE_SERIES = "give the folder of one series (dcm2niix or a DICOM sorter splits a study into one folder per series)"


@dataclass(frozen=True)
class Series:
    """One series' voxels (float32, axes: along a row, along a column, slice), its RAS+ affine and what it is."""

    data: np.ndarray
    affine: np.ndarray
    description: str
    modality: str | None


@dataclass(frozen=True)
class _Slice:
    path: Path
    header: Any  # the pydicom Dataset, read without its pixels

    @property
    def series(self) -> str:
        """The SeriesInstanceUID whole (up to 64 characters: never cut, two series may differ only at the end)."""
        return str(self.header.get("SeriesInstanceUID", "") or "").strip()

    def text(self, keyword: str, default: str = "") -> str:
        return one_line(self.header.get(keyword, default) or default, 60)

    def numbers(self, keyword: str) -> np.ndarray:
        """A tag's finite numbers, as many as the geometry needs (COUNTS); a missing or damaged tag is an InputError."""
        try:
            value = self.header.get(keyword)
            values = value if isinstance(value, Sequence) and not isinstance(value, (str, bytes)) else [value]
            numbers = np.asarray([float(v) for v in values] if value is not None else [])
        except (ValueError, TypeError, OverflowError, EOFError, OSError):
            raise InputError(f"{self.path}: its {keyword} is not numbers (a damaged file?)") from None
        if value is None or numbers.size == 0:
            raise InputError(f"{self.path}: no {keyword}, so not a slice of a volume (a localizer, a report or a secondary capture?)")
        if numbers.size != COUNTS.get(keyword, 1) or not np.all(np.isfinite(numbers)):
            raise InputError(f"{self.path}: its {keyword} should be {COUNTS.get(keyword, 1)} finite numbers, not {one_line(value, 60)}")
        return numbers


def read_series(folder: Path) -> Series:
    """The series in `folder` (its files, not its subfolders); any problem is an InputError naming the folder."""
    pydicom = volume_library("pydicom", "reading a DICOM series")
    slices, others, folders = _headers(folder, pydicom)
    if not slices:
        found = [f"{others} files that are not DICOM"] * bool(others) + [f"{folders} subfolders, not read"] * bool(folders)
        raise InputError(
            f"{folder}: no DICOM file in this folder ({', '.join(found) or 'it is empty'})",
            hint="give the folder that holds one series' slices",
        )
    _one_series(folder, slices)
    _same_geometry(folder, slices)
    ordered = _ordered(folder, slices)
    first = ordered[0]
    data = _pixels(ordered, pydicom)
    series = f"{first.text('Modality', 'DICOM')} series #{first.text('SeriesNumber', '?')} '{first.text('SeriesDescription')}'"
    return Series(
        data=data,
        affine=_affine(ordered),
        description=f"{series}, {len(ordered)} slices",
        modality=first.text("Modality") or None,
    )


def _headers(folder: Path, pydicom: Any) -> tuple[list[_Slice], int, int]:
    """Every DICOM file of the folder read without its pixels, and how many other files and subfolders there were."""
    try:
        entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
    except OSError as error:
        raise InputError(f"{folder}: cannot list this folder ({error.strerror or error})") from None
    slices, others, folders = [], 0, 0
    for entry in entries:
        if entry.name.startswith(".") or entry.name.upper() == "DICOMDIR" or not entry.is_file(follow_symlinks=True):
            folders += not entry.name.startswith(".") and entry.is_dir(follow_symlinks=True)
            continue
        path = Path(entry.path)
        try:
            header = pydicom.dcmread(path, stop_before_pixels=True)
        except pydicom.errors.InvalidDicomError:
            others += 1
            continue
        except (OSError, ValueError, EOFError, KeyError, TypeError) as error:
            raise InputError(f"{path}: cannot read this DICOM file ({one_line(error) or type(error).__name__}): truncated?") from None
        slices.append(_Slice(path, header))
    return slices, others, folders


def _one_series(folder: Path, slices: list[_Slice]) -> None:
    """One SeriesInstanceUID, single-frame slices: a folder of several series has no one geometry."""
    odd = next((s for s in slices if not s.series), None)
    if odd is not None:
        raise InputError(f"{odd.path}: a DICOM file without a SeriesInstanceUID (truncated, or no slice of an image series?)")
    counts = Counter(s.series for s in slices)
    if len(counts) > 1:
        names = {s.series: f"#{s.text('SeriesNumber', '?')} '{s.text('SeriesDescription')}'" for s in slices}
        listed = ", ".join(f"{names[uid]} ({count} file{'s' if count > 1 else ''})" for uid, count in counts.most_common())
        raise InputError(f"{folder}: {len(counts)} DICOM series in one folder: {listed}", hint=ONE_SERIES)
    for s in slices:
        if int(s.header.get("NumberOfFrames", 1) or 1) > 1:
            raise InputError(
                f"{s.path}: a multi-frame (enhanced) DICOM file, not read yet",
                hint="convert the series to NIfTI (dcm2niix) and give the .nii.gz",
            )
    if len(slices) < 2:
        raise InputError(f"{folder}: one slice only, a 2-D image rather than a volume", hint="give the folder of the whole series")


def _same_geometry(folder: Path, slices: list[_Slice]) -> None:
    """Every slice of one size, pixel spacing and orientation: else no one affine maps the stack."""
    for keyword, what, tolerance in (("Rows", "sizes", 0.0), ("Columns", "sizes", 0.0), ("PixelSpacing", "pixel spacings", 1e-4)):
        first = slices[0].numbers(keyword)
        odd = next((s for s in slices if not np.allclose(s.numbers(keyword), first, rtol=0, atol=tolerance)), None)
        if odd is not None:
            raise InputError(
                f"{folder}: slices of different {what}: {_shape(slices[0])} ({slices[0].path.name}) and {_shape(odd)} ({odd.path.name})",
                hint="give the folder of one series, every slice of one geometry",
            )
    first = slices[0].numbers("ImageOrientationPatient")
    odd = next((s for s in slices if not np.allclose(s.numbers("ImageOrientationPatient"), first, rtol=0, atol=1e-4)), None)
    if odd is not None:
        raise InputError(
            f"{folder}: slices of different orientations: {slices[0].path.name} and {odd.path.name} "
            "(a localizer or a reformatted plane among the slices?)",
            hint=ONE_SERIES,
        )


def _shape(s: _Slice) -> str:
    rows, columns = int(s.numbers("Rows")[0]), int(s.numbers("Columns")[0])
    spacing = "x".join(f"{v:g}" for v in s.numbers("PixelSpacing"))
    return f"{columns}x{rows} pixels of {spacing} mm"


def _ordered(folder: Path, slices: list[_Slice]) -> list[_Slice]:
    """The slices sorted along the normal of their plane, evenly spaced (a gap is a missing slice: refused, named)."""
    orientation = slices[0].numbers("ImageOrientationPatient")
    normal = np.cross(orientation[:3], orientation[3:])
    where = np.asarray([float(np.dot(s.numbers("ImagePositionPatient"), normal)) for s in slices])
    order = np.argsort(where, kind="stable")
    ordered, where = [slices[i] for i in order], where[order]
    steps = np.diff(where)
    same = int(np.argmin(steps))
    if steps[same] < 1e-3:
        raise InputError(
            f"{folder}: two slices at the same position ({where[same]:.2f} mm along the normal): "
            f"{ordered[same].path.name} and {ordered[same + 1].path.name} (several echoes, phases or times in one series?)",
            hint="split the series by echo or time (dcm2niix does) and give one volume",
        )
    step = float(np.median(steps))
    worst = int(np.argmax(np.abs(steps - step)))
    if abs(steps[worst] - step) > SPACING_TOLERANCE * step:
        missing = max(1, round(steps[worst] / step) - 1)
        raise InputError(
            f"{folder}: slices not evenly spaced: {steps[worst]:.3g} mm between {ordered[worst].path.name} and "
            f"{ordered[worst + 1].path.name} (at {where[worst]:.2f} and {where[worst + 1]:.2f} mm along the normal) where the "
            f"others are {step:.3g} mm apart: " + (f"{missing} slice(s) missing there" if steps[worst] > step else "uneven spacing"),
            hint="give the whole series (every slice's file)",
        )
    return ordered


def _pixels(ordered: list[_Slice], pydicom: Any) -> np.ndarray:
    """The slices' pixels through the modality LUT (Hounsfield units for CT), stacked (columns, rows, slices)."""
    try:
        from pydicom.pixels import apply_modality_lut
    except ImportError:  # pydicom 2.4, where it lived before 3.0
        from pydicom.pixel_data_handlers.util import apply_modality_lut  # type: ignore[no-redef]

    first = ordered[0]
    rows, columns = int(first.numbers("Rows")[0]), int(first.numbers("Columns")[0])
    data = np.empty((columns, rows, len(ordered)), dtype=np.float32)
    for index, s in enumerate(ordered):
        try:
            dataset = pydicom.dcmread(s.path)
            pixels = apply_modality_lut(dataset.pixel_array, dataset)
        except (OSError, ValueError, EOFError, KeyError, TypeError, AttributeError, RuntimeError) as error:
            raise InputError(f"{s.path}: cannot read this slice's pixels ({one_line(error) or type(error).__name__}): truncated?") from None
        if pixels.shape != (rows, columns):
            raise InputError(f"{s.path}: pixel data of shape {pixels.shape}, not the {rows}x{columns} its header says")
        data[:, :, index] = np.asarray(pixels, dtype=np.float32).T
    return data


def _affine(ordered: list[_Slice]) -> np.ndarray:
    """Voxel (column, row, slice) → RAS+ mm: DICOM's LPS affine from orientation, spacing and positions, x and y negated."""
    orientation = ordered[0].numbers("ImageOrientationPatient")
    row_spacing, column_spacing = ordered[0].numbers("PixelSpacing")
    first, last = ordered[0].numbers("ImagePositionPatient"), ordered[-1].numbers("ImagePositionPatient")
    lps = np.eye(4)
    lps[:3, 0] = orientation[:3] * column_spacing  # along a row: from one column to the next
    lps[:3, 1] = orientation[3:] * row_spacing  # along a column: from one row to the next
    lps[:3, 2] = (last - first) / (len(ordered) - 1)
    lps[:3, 3] = first
    return LPS_TO_RAS @ lps
