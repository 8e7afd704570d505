"""Volumes explained slice by slice with a 2-D model (--slices): each slice upright, the maps stacked back into a NIfTI
with the scan's affine, a montage, a record per slice; DICOM series folders as one input; bad volumes one line each."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import EXAMPLE_MODEL, EXAMPLES, require, write_image

sys.path.insert(0, str(EXAMPLES))
from shapes import make_scene  # noqa: E402

nibabel = require("nibabel")
require("pydicom")
MAP_GRID = 5  # the example classifier's layer4 grid on its 160x160 input: a map's peak lies at best within a cell
SIDE = 160
# a coronal acquisition stored in LPS order: array axes point left, inferior, posterior (not RAS, not diagonal)
AFFINE = np.array([[-0.8, 0.0, 0.0, 60.0], [0.0, 0.0, -2.0, 40.0], [0.0, -0.7, 0.0, 90.0], [0, 0, 0, 1.0]])


def shape_volume(path: Path, slices: int = 4, seed: int = 4) -> tuple[int, tuple[int, int, int, int], np.ndarray]:
    """A NIfTI whose upright axial slices are each the same grey shapes scene: its class, the shape's box on a slice."""
    from gradcam_cli.inputs.volume_planes import Plane, from_plane_slices, plane_stack_shape

    image, cls, box = make_scene(np.random.default_rng(seed), SIDE, SIDE)
    grey = np.asarray(image.convert("L"), np.float32) * 4.0 - 500.0  # intensities like a CT's, not 0..255
    shape = (SIDE, slices, SIDE)  # array order: (left, inferior, posterior) per AFFINE: axial slices along the second
    stacked = plane_stack_shape(shape, AFFINE, Plane.axial)
    assert stacked[1:] == (SIDE, SIDE), stacked
    stack = np.repeat(grey[None], stacked[0], axis=0)
    data = from_plane_slices(stack, AFFINE, Plane.axial, shape)
    nibabel.save(nibabel.Nifti1Image(data.astype(np.float32), AFFINE), str(path))
    return cls, box, data


def outputs_of(out: Path, volume: Path, method: str = "gradcam") -> tuple[Path, Path]:
    folder = out / volume.relative_to(Path.cwd()).parent
    return folder / f"{volume.name}.{method}.nii.gz", folder / f"{volume.name}.{method}.png"


def test_a_volumes_slices_are_explained_upright_and_the_map_keeps_the_scans_space(run_cli, tmp_path, in_test_folder) -> None:
    from gradcam_cli.inputs.volume_planes import Plane, plane_slices

    scan = Path.cwd() / "scan.nii.gz"
    cls, (x0, y0, x1, y1), data = shape_volume(scan)
    out = tmp_path / "out"
    result = run_cli("explain", scan, *EXAMPLE_MODEL, "--slices", "axial", "-o", out, "--json")
    assert result.code == 0, result.stderr
    records = result.records()
    assert [r["slice"] for r in records] == [0, 1, 2, 3] and {r["class_index"] for r in records} == {cls}
    assert all(r["intensity"].startswith("percentiles 0.5-99.5") for r in records)
    nifti, montage = outputs_of(out, scan)
    assert records[0]["outputs"] == [str(montage)]
    written = nibabel.load(str(nifti))
    np.testing.assert_allclose(written.affine, AFFINE, atol=1e-6)
    assert written.shape == data.shape and nibabel.aff2axcodes(written.affine) == ("L", "I", "P")
    cell = SIDE / MAP_GRID
    for k, cam in enumerate(plane_slices(np.asarray(written.dataobj), AFFINE, Plane.axial)):
        y, x = np.unravel_index(cam.argmax(), cam.shape)  # the slice as the model saw it: the map lies on the shape
        outside = max(max(x0 - x, 0, x - (x1 - 1)), max(y0 - y, 0, y - (y1 - 1))) / cell
        assert outside <= 0.5, f"slice {k}: the peak ({x}, {y}) is {outside:.2f} cells from the shape's box"
    assert montage.read_bytes().startswith(b"\x89PNG")


def test_a_window_is_said_in_each_slices_record(run_cli, tmp_path, in_test_folder) -> None:
    scan = Path.cwd() / "scan.nii"
    shape_volume(scan, slices=2)
    result = run_cli("explain", scan, *EXAMPLE_MODEL, "--slices", "axial", "--window", "100,1000", "-o", tmp_path / "o", "--json")
    assert result.code == 0 and {r["intensity"] for r in result.records()} == {"window 100,1000"}
    bad = run_cli("explain", scan, *EXAMPLE_MODEL, "--slices", "axial", "--window", "100", "-o", tmp_path / "o")
    assert bad.code == 2 and "--window 100 is not two numbers C,W" in bad.stderr


def test_a_dicom_series_folder_is_one_volume_and_its_map_lines_up(run_cli, tmp_path, in_test_folder) -> None:
    from test_volumes import write_series

    from gradcam_cli.inputs.volumes import read_volume

    series = Path.cwd() / "study" / "series"
    write_series(series, count=3, rows=48, columns=64)  # files named IM0000... without a suffix, as PACS export them
    result = run_cli("explain", series.parent, "-r", *EXAMPLE_MODEL, "--slices", "coronal", "-o", tmp_path / "o", "--json")
    assert result.code == 0, result.stderr
    assert {r["input"] for r in result.records()} == {str(series)}
    nifti, _ = outputs_of(tmp_path / "o", series)
    np.testing.assert_allclose(nibabel.load(str(nifti)).affine, read_volume(series).affine, atol=1e-5)


def test_bad_volumes_are_one_line_each_and_the_rest_is_done(run_cli, tmp_path, in_test_folder) -> None:
    from test_volumes import write_series

    folder = Path.cwd() / "in"
    folder.mkdir()
    shape_volume(folder / "good.nii.gz", slices=2)
    nibabel.save(nibabel.Nifti1Image(np.zeros((8, 8, 4, 3), np.float32), np.eye(4)), str(folder / "timeseries.nii.gz"))
    (folder / "broken.nii.gz").write_bytes((folder / "good.nii.gz").read_bytes()[:200])
    write_series(folder / "two", count=3, rows=8, columns=8)
    write_series(folder / "two", count=3, rows=8, columns=8, names=[7, 8, 9], SeriesNumber=2)
    write_image(folder / "still.png", 160, 120)
    result = run_cli("explain", folder, "-r", *EXAMPLE_MODEL, "--slices", "axial", "-o", tmp_path / "o", "--json")
    assert result.code == 1
    records = result.records()
    errors = {Path(r["input"]).name: r["error"] for r in records if not r["ok"]}
    assert set(errors) == {"timeseries.nii.gz", "broken.nii.gz", "two"}, errors
    assert "4-D" in errors["timeseries.nii.gz"] and "series" in errors["two"]
    assert all("\n" not in line and "Traceback" not in line for line in errors.values())
    assert {Path(r["input"]).name for r in records if r["ok"]} == {"good.nii.gz", "still.png"}


def test_skip_existing_skips_a_whole_volume(run_cli, tmp_path, in_test_folder) -> None:
    scan = Path.cwd() / "scan.nii.gz"
    shape_volume(scan, slices=2)
    out = tmp_path / "o"
    assert run_cli("explain", scan, *EXAMPLE_MODEL, "--slices", "axial", "-o", out).code == 0
    nifti, montage = outputs_of(out, scan)
    made = nifti.stat().st_mtime_ns
    again = run_cli("explain", scan, *EXAMPLE_MODEL, "--slices", "axial", "-o", out, "--skip-existing", "--json")
    assert [r["skipped"] for r in again.records()] == [True] and nifti.stat().st_mtime_ns == made
    other = run_cli("explain", scan, *EXAMPLE_MODEL, "--slices", "axial", "-o", out, "--method", "gradcam", "--alpha", "0.3")
    assert other.code != 0 and "was made by another run (alpha 0.5, this run 0.3)" in other.stderr


@pytest.mark.parametrize("plane", ["coronal", "sagittal"])
def test_every_plane_puts_its_maps_back_in_the_scans_shape(run_cli, tmp_path, in_test_folder, plane) -> None:
    scan = Path.cwd() / "scan.nii.gz"
    _, _, data = shape_volume(scan, slices=6)
    result = run_cli("explain", scan, *EXAMPLE_MODEL, "--slices", plane, "-o", tmp_path / "o", "--json")
    assert result.code == 0, result.stderr
    written = nibabel.load(str(outputs_of(tmp_path / "o", scan)[0]))
    assert written.shape == data.shape and np.isfinite(np.asarray(written.dataobj)).all()
    assert len(result.records()) == 160  # the scan is 160 voxels across, left to right and front to back


def test_a_volume_without_nibabel_is_one_line_and_the_images_are_done(run_cli, tmp_path, in_test_folder, monkeypatch) -> None:
    scan = Path.cwd() / "scan.nii.gz"
    shape_volume(scan, slices=2)
    still = write_image(Path.cwd() / "still.png", 160, 120)
    monkeypatch.setitem(sys.modules, "nibabel", None)
    result = run_cli("explain", scan, still, *EXAMPLE_MODEL, "--slices", "axial", "-o", tmp_path / "o", "--json")
    records = result.records()
    assert result.code == 1 and records[1]["ok"] is True
    assert "needs nibabel" in records[0]["error"] and "pip install 'gradcam-cli[volumes]'" in records[0]["error"]
