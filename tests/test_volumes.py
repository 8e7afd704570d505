"""3-D volumes in and out: NIfTI and DICOM series read with their world space, planes and back, the map written in place.

Every volume is made by the test (NIfTI with nibabel, DICOM slices with pydicom
from scratch), with affines that are neither identity nor RAS-ordered (flipped,
permuted, oblique), so a reader or writer that drops or reorders the affine fails.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import require

from gradcam_cli.errors import InputError, UsageError
from gradcam_cli.inputs.volume_intensity import Window, parse_window, scale_intensity
from gradcam_cli.inputs.volume_planes import (
    Plane,
    from_plane_slices,
    plane_axes,
    plane_position,
    plane_slice,
    plane_slices,
    plane_stack_shape,
)
from gradcam_cli.inputs.volumes import Volume, read_volume

nib = require("nibabel")
pydicom = require("pydicom")

AFFINE_TOLERANCE = 1e-6  # sform is stored as float32: the written map's affine must equal the input's as read, bit for bit
POSITION_TOLERANCE = 1e-3  # mm: DICOM positions are written as decimal strings with 4 decimals here


def rotation(z_degrees: float, x_degrees: float) -> np.ndarray:
    z, x = math.radians(z_degrees), math.radians(x_degrees)
    about_z = np.array([[math.cos(z), -math.sin(z), 0], [math.sin(z), math.cos(z), 0], [0, 0, 1]])
    about_x = np.array([[1, 0, 0], [0, math.cos(x), -math.sin(x)], [0, math.sin(x), math.cos(x)]])
    return about_z @ about_x


def oblique_coronal_affine() -> np.ndarray:
    """A coronal acquisition tilted 12° and 8°: array axis 0 → patient's left (−x), 1 → inferior (−z), 2 → posterior (−y)."""
    axes = np.array([[-1.0, 0, 0], [0, 0, -1.0], [0, -1.0, 0]]).T  # columns: where each array axis points in RAS
    affine = np.eye(4)
    affine[:3, :3] = rotation(12, 8) @ axes @ np.diag([0.8, 1.5, 3.0])
    affine[:3, 3] = [40.5, -12.25, 70.0]
    return affine


AFFINES = {
    "RAS": np.diag([1.0, 1.0, 2.0, 1.0]),
    "LPS": np.diag([-0.7, -0.7, 2.5, 1.0]),
    "oblique coronal": oblique_coronal_affine(),
}


def write_nifti(path: Path, data: np.ndarray, affine: np.ndarray, slope: float = 1.0, inter: float = 0.0) -> Path:
    image = nib.Nifti1Image(data, affine)
    image.set_sform(affine, code=2)  # aligned to another scan: a code other than nibabel's default, to see it kept
    image.set_qform(affine, code=1)
    image.header.set_slope_inter(slope, inter)
    nib.save(image, path)
    return path


# ---------------------------------------------------------------- NIfTI in, map out


def test_a_nifti_map_keeps_the_scans_space(tmp_path: Path) -> None:
    from gradcam_cli.outputs.volume_files import write_map_nifti

    affine = oblique_coronal_affine()
    raw = np.random.default_rng(0).integers(-100, 100, size=(7, 5, 6)).astype(np.int16)
    source = write_nifti(tmp_path / "scan.nii.gz", raw, affine, slope=2.0, inter=-10.0)
    volume = read_volume(source)
    assert volume.data.dtype == np.float32 and volume.data.shape == (7, 5, 6)
    assert np.array_equal(volume.data, raw * 2.0 - 10.0), "the header's scaling applied"
    assert volume.axcodes == nib.aff2axcodes(affine) == ("L", "I", "P")
    assert np.allclose(volume.spacing, (0.8, 1.5, 3.0), atol=1e-5)
    cam = np.random.default_rng(1).random((7, 5, 6)).astype(np.float32)
    write_map_nifti(tmp_path / "out" / "scan.gradcam.nii.gz", cam, volume)
    written = nib.load(tmp_path / "out" / "scan.gradcam.nii.gz")
    scan = nib.load(source)
    assert written.shape == scan.shape
    assert np.allclose(written.affine, scan.affine, rtol=0, atol=AFFINE_TOLERANCE)
    assert np.allclose(written.affine, affine, rtol=0, atol=1e-4)  # float32 storage of the sform
    assert nib.aff2axcodes(written.affine) == nib.aff2axcodes(scan.affine)
    header = written.header
    assert (int(header["sform_code"]), int(header["qform_code"])) == (2, 1)
    assert np.allclose(header.get_qform(), scan.header.get_qform(), rtol=0, atol=AFFINE_TOLERANCE)
    assert header.get_data_dtype() == np.float32 and header.get_zooms() == scan.header.get_zooms()
    assert (written.dataobj.slope, written.dataobj.inter) == (1.0, 0.0), "values read as written, not by the scan's scaling"
    assert np.array_equal(written.get_fdata(dtype=np.float32), cam)
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["scan.gradcam.nii.gz"], "no temporary file left"


def test_a_4d_nifti_of_one_volume_is_squeezed_and_a_time_series_refused(tmp_path: Path) -> None:
    one = read_volume(write_nifti(tmp_path / "one.nii", np.ones((4, 5, 6, 1), np.float32), AFFINES["LPS"]))
    assert one.data.shape == (4, 5, 6)
    with pytest.raises(InputError) as error:
        read_volume(write_nifti(tmp_path / "bold.nii.gz", np.ones((4, 5, 6, 3), np.float32), AFFINES["LPS"]))
    said = str(error.value)
    assert "bold.nii.gz" in said and "4x5x6x3" in said and "pick one volume" in said and "\n" not in said


@pytest.mark.parametrize("name", ["scan.nii", "scan.nii.gz"])
def test_a_truncated_nifti_is_one_line(tmp_path: Path, name: str) -> None:
    path = write_nifti(tmp_path / name, np.arange(20 * 20 * 20, dtype=np.float32).reshape(20, 20, 20), AFFINES["RAS"])
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(InputError) as error:
        read_volume(path)
    assert name in str(error.value) and "truncated" in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("library", ["nibabel", "pydicom"])
def test_a_missing_library_says_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, library: str) -> None:
    path = write_nifti(tmp_path / "scan.nii", np.ones((3, 3, 3), np.float32), AFFINES["RAS"]) if library == "nibabel" else tmp_path
    monkeypatch.setitem(sys.modules, library, None)  # `import LIBRARY` raises ImportError
    with pytest.raises(InputError, match=rf"needs {library}.*pip install 'gradcam-cli\[volumes\]'"):
        read_volume(path)


def test_a_nifti2_map_is_nifti2(tmp_path: Path) -> None:
    from gradcam_cli.outputs.volume_files import write_map_nifti

    affine = oblique_coronal_affine()
    nib.save(nib.Nifti2Image(np.zeros((3, 4, 5), np.float32), affine), tmp_path / "scan.nii")
    volume = read_volume(str(tmp_path / "scan.nii"))
    write_map_nifti(tmp_path / "map.nii", np.ones((3, 4, 5), np.float32), volume)
    written = nib.load(tmp_path / "map.nii")
    assert isinstance(written, nib.Nifti2Image) and np.allclose(written.affine, volume.affine, rtol=0, atol=AFFINE_TOLERANCE)


# ---------------------------------------------------------------- DICOM series


def write_slice(path: Path, pixels: np.ndarray, position: np.ndarray, orientation: np.ndarray, **tags: object) -> Path:
    """One CT slice from scratch: file meta, patient geometry, 16-bit signed pixels, a rescale to Hounsfield units."""
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.uid import CTImageStorage, ExplicitVRLittleEndian, generate_uid

    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = CTImageStorage
    meta.MediaStorageSOPInstanceUID = generate_uid(entropy_srcs=[str(path)])
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = Dataset()
    ds.file_meta = meta
    ds.SOPClassUID, ds.SOPInstanceUID = CTImageStorage, meta.MediaStorageSOPInstanceUID
    ds.Modality = "CT"
    ds.SeriesInstanceUID = generate_uid(entropy_srcs=[str(tags.get("SeriesNumber", 1))])
    ds.SeriesNumber, ds.SeriesDescription = 1, "ABDOMEN AX"
    ds.ImagePositionPatient = [f"{v:.4f}" for v in position]
    ds.ImageOrientationPatient = [f"{v:.6f}" for v in orientation]
    ds.PixelSpacing = ["0.75", "0.6"]  # between rows, between columns
    ds.Rows, ds.Columns = pixels.shape
    ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME2"
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 16, 16, 15, 1
    ds.RescaleSlope, ds.RescaleIntercept = 2, -1024
    for keyword, value in tags.items():
        setattr(ds, keyword, value)
    ds.PixelData = pixels.astype("<i2").tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    ds.save_as(path, enforce_file_format=True)
    return path


ORIENTATION = rotation(20, 10)  # columns: the row direction, the column direction, the normal (DICOM LPS)
ORIGIN = np.array([-120.5, 80.25, -300.0])
STEP = 2.5  # mm between slices


def write_series(folder: Path, count: int = 5, rows: int = 3, columns: int = 4, names: list[int] | None = None, **tags: object) -> None:
    """`count` slices, slice k's raw value at row r, column c = 100 k + 10 r + c; file k named `names[k]`."""
    orientation = np.concatenate([ORIENTATION[:, 0], ORIENTATION[:, 1]])
    r, c = np.mgrid[:rows, :columns]
    for k in range(count):
        name = f"IM{(names[k] if names else k):04d}"
        write_slice(folder / name, 100 * k + 10 * r + c, ORIGIN + k * STEP * ORIENTATION[:, 2], orientation, **tags)


def test_a_dicom_series_in_order_with_its_affine_and_hounsfield_units(tmp_path: Path) -> None:
    shuffled = [3, 0, 4, 1, 2]  # slice k in file IM000{shuffled[k]}: names sort in another order than positions
    write_series(tmp_path / "ct", names=shuffled)
    (tmp_path / "ct" / "README.txt").write_text("not DICOM", encoding="utf-8")
    volume = read_volume(tmp_path / "ct")
    assert volume.data.shape == (4, 3, 5) and volume.data.dtype == np.float32  # (columns, rows, slices)
    k, r, c = np.meshgrid(range(5), range(3), range(4), indexing="ij")
    expected = (100 * k + 10 * r + c) * 2.0 - 1024  # RescaleSlope 2, RescaleIntercept -1024
    assert np.array_equal(volume.data, expected.transpose(2, 1, 0)), "slices by position, Hounsfield units"
    lps = np.eye(4)
    lps[:3, 0], lps[:3, 1], lps[:3, 2], lps[:3, 3] = ORIENTATION[:, 0] * 0.6, ORIENTATION[:, 1] * 0.75, ORIENTATION[:, 2] * STEP, ORIGIN
    assert np.allclose(volume.affine, np.diag([-1, -1, 1, 1]) @ lps, rtol=0, atol=POSITION_TOLERANCE)
    assert np.allclose(volume.spacing, (0.6, 0.75, STEP), atol=POSITION_TOLERANCE)
    assert volume.modality == "CT" and "ABDOMEN AX" in volume.description
    # the header made for it writes a NIfTI in the same space
    assert np.allclose(volume.header.get_sform(), volume.affine, atol=1e-4) and int(volume.header["sform_code"]) == 1


def test_a_dicom_series_map_lines_up_as_nifti(tmp_path: Path) -> None:
    from gradcam_cli.outputs.volume_files import write_map_nifti

    write_series(tmp_path / "ct")
    volume = read_volume(tmp_path / "ct")
    cam = np.linspace(0, 1, volume.data.size, dtype=np.float32).reshape(volume.data.shape)
    write_map_nifti(tmp_path / "map.nii.gz", cam, volume)
    written = nib.load(tmp_path / "map.nii.gz")
    assert written.shape == volume.data.shape and np.allclose(written.affine, volume.affine, rtol=0, atol=1e-4)
    assert nib.aff2axcodes(written.affine) == volume.axcodes and np.array_equal(written.get_fdata(dtype=np.float32), cam)


def one_line_error(path: Path) -> str:
    with pytest.raises(InputError) as error:
        read_volume(path)
    said = str(error.value)
    assert "\n" not in said and str(path) in said
    return said


def test_two_series_in_one_folder_are_named(tmp_path: Path) -> None:
    write_series(tmp_path / "study", count=3)
    write_series(tmp_path / "study", count=2, names=[10, 11], SeriesNumber=7, SeriesDescription="LUNG COR")
    said = one_line_error(tmp_path / "study")
    assert "2 DICOM series" in said and "#1 'ABDOMEN AX' (3 files)" in said and "#7 'LUNG COR' (2 files)" in said


def test_a_missing_slice_is_named(tmp_path: Path) -> None:
    write_series(tmp_path / "ct", count=6)
    (tmp_path / "ct" / "IM0003").unlink()
    said = one_line_error(tmp_path / "ct")
    assert "IM0002 and IM0004" in said and "1 slice(s) missing" in said and "5 mm" in said


def test_slices_of_other_sizes_or_orientations_are_refused(tmp_path: Path) -> None:
    write_series(tmp_path / "sizes", count=3)
    write_series(tmp_path / "sizes", count=1, rows=5, names=[9])
    assert "different sizes" in one_line_error(tmp_path / "sizes")
    write_series(tmp_path / "turned", count=3)
    write_slice(tmp_path / "turned" / "LOC", np.zeros((3, 4)), ORIGIN + 9 * ORIENTATION[:, 2], np.array([1.0, 0, 0, 0, 0, -1]))
    assert "different orientations" in one_line_error(tmp_path / "turned")
    write_series(tmp_path / "bad", count=3)
    write_slice(tmp_path / "bad" / "ODD", np.zeros((3, 4)), ORIGIN, np.array([1.0, 0, 0, 0, 1, 0]), PixelSpacing=["0.75"])
    assert "ODD: its PixelSpacing should be 2 finite numbers" in one_line_error(tmp_path / "bad")


def test_a_folder_without_dicom_and_a_truncated_slice(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert "no DICOM file" in one_line_error(tmp_path / "empty")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("hello", encoding="utf-8")
    assert "no DICOM file in this folder (1 files that are not DICOM)" in one_line_error(tmp_path / "notes")
    write_series(tmp_path / "study" / "series1", count=2)
    assert "(1 subfolders, not read)" in one_line_error(tmp_path / "study")
    write_series(tmp_path / "cut", count=3, rows=16, columns=16)
    path = tmp_path / "cut" / "IM0001"
    for keep in (-200, 300):  # the pixels cut short; the header cut in the middle
        path.write_bytes(path.read_bytes()[:keep])
        with pytest.raises(InputError) as error:
            read_volume(tmp_path / "cut")
        assert str(path) in str(error.value) and "truncated" in str(error.value) and "\n" not in str(error.value)


# ---------------------------------------------------------------- intensity


def test_a_window_clips_and_percentiles_by_default() -> None:
    data = np.array([-1000.0, -160.0, 40.0, 240.0, 3000.0, np.nan], dtype=np.float32)
    scaled, said = scale_intensity(data, parse_window("40,400"))
    assert said == "window 40,400" and np.allclose(scaled, [0, 0, 0.5, 1, 1, 0])
    ramp = np.arange(1001, dtype=np.float32)
    scaled, said = scale_intensity(ramp)
    assert said == "percentiles 0.5-99.5: 5..995" and scaled[5] == 0 and scaled[995] == 1 and scaled[500] == pytest.approx(0.5)
    assert scale_intensity(np.full(8, 7.0))[0].max() == 0


@pytest.mark.parametrize("text", ["40", "40,400,1", "a,b", "40,0", "40,-5", "nan,400", ""])
def test_a_bad_window_is_one_usage_line(text: str) -> None:
    with pytest.raises(UsageError) as error:
        parse_window(text)
    assert "window" in str(error.value) and "40,400" in str(error.value) and "\n" not in str(error.value)


def test_a_window_reads_negative_centres() -> None:
    assert parse_window(" -600 , 1500 ") == Window(-600.0, 1500.0)


# ---------------------------------------------------------------- planes


def world_coordinates(shape: tuple[int, int, int], affine: np.ndarray) -> np.ndarray:
    """(3, *shape): each voxel's RAS+ position."""
    index = np.indices(shape).reshape(3, -1)
    return (affine[:3, :3] @ index + affine[:3, 3:4]).reshape(3, *shape)


@pytest.mark.parametrize("name", list(AFFINES))
def test_planes_are_upright_and_go_back_exactly(name: str) -> None:
    affine, shape = AFFINES[name], (6, 7, 8)
    data = np.random.default_rng(2).random(shape).astype(np.float32)
    x, y, z = world_coordinates(shape, affine)
    # rows, columns: which world coordinate must fall down the rows and along the columns (radiological display)
    upright = {Plane.axial: (y, x), Plane.coronal: (z, x), Plane.sagittal: (z, y)}
    for plane, (down, across) in upright.items():
        stack = plane_slices(data, affine, plane)
        assert stack.shape == plane_stack_shape(shape, affine, plane)
        assert np.all(np.diff(plane_slices(down, affine, plane), axis=1) < 0), f"{plane.value}: up is anterior or superior"
        assert np.all(np.diff(plane_slices(across, affine, plane), axis=2) < 0), f"{plane.value}: the patient's right on the left"
        assert np.array_equal(from_plane_slices(stack, affine, plane, shape), data)
        assert np.array_equal(plane_slice(data, affine, plane, 2), stack[2])
        voxel = (4, 1, 5)
        assert stack[plane_position(voxel, shape, affine, plane)] == data[voxel]
    with pytest.raises(ValueError, match="resize each map"):
        from_plane_slices(np.zeros((2, 2, 2)), affine, Plane.axial, shape)


def test_which_axis_each_plane_takes() -> None:
    assert plane_axes(AFFINES["RAS"]) == {Plane.sagittal: 0, Plane.coronal: 1, Plane.axial: 2}
    assert plane_axes(oblique_coronal_affine()) == {Plane.sagittal: 0, Plane.coronal: 2, Plane.axial: 1}


# ---------------------------------------------------------------- the montage


def blob_volume(affine: np.ndarray, shape: tuple[int, int, int], world: np.ndarray) -> tuple[Volume, np.ndarray, tuple[int, ...]]:
    """A scan of noise and a map with a bright blob centred on the voxel nearest `world` (RAS+ mm)."""
    voxel = tuple(int(v) for v in np.round(np.linalg.solve(affine[:3, :3], world - affine[:3, 3])))
    index = np.indices(shape)
    distance = sum((index[a] - voxel[a]) ** 2 for a in range(3))
    cam = np.exp(-distance / 4.0).astype(np.float32)
    scan = np.random.default_rng(3).normal(40, 20, shape).astype(np.float32)
    spacing = tuple(float(v) for v in np.linalg.norm(affine[:3, :3], axis=0))
    volume = Volume(scan, affine, nib.Nifti1Header(), spacing, Path("blob.nii.gz"), "a test volume")  # type: ignore[arg-type]
    return volume, cam, voxel


def test_the_montage_centres_on_the_blob_in_its_world_place(tmp_path: Path) -> None:
    from PIL import Image

    from gradcam_cli.outputs.volume_files import GAP, MONTAGE_SIDE, write_montage

    affine = oblique_coronal_affine()
    world = np.array([35.0, -24.0, 59.5])  # near voxel (10, 6, 4)
    volume, cam, voxel = blob_volume(affine, (20, 12, 9), world)
    drawn = write_montage(tmp_path / "blob.montage.png", volume, cam, scale_intensity(volume.data)[0])
    assert drawn.peak.voxel == voxel
    assert np.allclose(drawn.peak.world, affine[:3, :3] @ voxel + affine[:3, 3], atol=1e-6)
    assert np.linalg.norm(np.asarray(drawn.peak.world) - world) < max(volume.spacing), "within a voxel of where it was put"
    assert np.array_equal(np.asarray(Image.open(tmp_path / "blob.montage.png").convert("RGB")), drawn.rgb)
    for plane, (x, y) in drawn.marks.items():
        red, _green, blue = drawn.rgb[y, x].astype(int)
        assert red > blue + 60, f"{plane.value}: the map's hottest colour at the peak's place, got {drawn.rgb[y, x]}"
    assert drawn.rgb.shape[1] <= 3 * MONTAGE_SIDE + 2 * GAP


def test_the_montage_has_the_bodys_proportions() -> None:
    from gradcam_cli.outputs.volume_files import GAP, LABEL_BAND, MONTAGE_SIDE, montage

    affine = np.diag([1.0, 2.0, 4.0, 1.0])  # 40 x 20 x 10 voxels: 40 mm every way, so three square slices
    volume, cam, _voxel = blob_volume(affine, (40, 20, 10), np.array([20.0, 20.0, 20.0]))
    drawn = montage(volume, cam, scale_intensity(volume.data)[0])
    assert drawn.rgb.shape[1] == 3 * MONTAGE_SIDE + 2 * GAP
    # voxel (20, 10, 5): on the axial slice column 39 - 20 of 40 (the patient's right on the left), row 19 - 10 of 20
    assert drawn.marks[Plane.axial] == (int(19.5 * MONTAGE_SIDE / 40), LABEL_BAND + int(9.5 * MONTAGE_SIDE / 20))
