"""Volumes whole through a 3-D model: the map volume in the scan's own voxels and space (NIfTI with its affine), its
montage, one record; the model's input its ⟨input_size⟩ DxHxW; what a 3-D run cannot take, one line each."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from conftest import EXAMPLES, require, write_image

nibabel = require("nibabel")

# A 3-D network (one channel, as CT networks are) whose score reads only one block of its features: depth 4-8, rows 8-16,
# columns 16-24 of its 16x32x32 input. Its map (hirescam) can lie nowhere else.
NET = """
import torch
from torch import nn


class BlockReader(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv3d(1, 4, 3, padding=1), nn.ReLU())
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        a = self.features(x)
        return self.head(a[:, :, 4:8, 8:16, 16:24].mean(dim=(2, 3, 4)))


def build():
    torch.manual_seed(0)
    net = BlockReader()
    with torch.no_grad():
        net.features[0].bias.fill_(0.5)
        net.head.weight.fill_(1.0)
    return net
"""
AFFINE = np.array([[0.0, 0.0, -1.5, 30.0], [-0.9, 0.0, 0.0, 12.0], [0.0, 1.1, 0.0, -40.0], [0, 0, 0, 1.0]])  # permuted, flipped
MODEL = ("--model", "net.py:build", "--input-size", "16x32x32", "--layer", "features", "--method", "hirescam")


def scan(path: Path, shape: tuple[int, int, int] = (32, 64, 48)) -> np.ndarray:
    data = np.random.default_rng(0).normal(0.0, 100.0, shape).astype(np.float32)
    nibabel.save(nibabel.Nifti1Image(data, AFFINE), str(path))
    return data


def test_a_3d_models_map_lies_on_the_voxels_it_read_in_the_scans_space(run_cli, tmp_path, in_test_folder) -> None:
    """The 16x32x32 input is the 32x64x48 scan halved along its first axis and... resized: the block it reads (4-8, 8-16,
    16-24) is voxels 8-16, 16-32, 24-36 of the scan."""
    (Path.cwd() / "net.py").write_text(NET)
    data = scan(Path.cwd() / "ct.nii.gz")
    out = tmp_path / "out"
    result = run_cli("explain", "ct.nii.gz", *MODEL, "--mean", "0.5", "--std", "0.5", "--window", "0,400", "-o", out, "--json")
    assert result.code == 0, result.stderr
    (record,) = result.records()
    assert record["ok"] and record["intensity"] == "window 0,400" and record["outputs"] == [str(out / "ct.nii.gz.hirescam.png")]
    written = nibabel.load(str(out / "ct.nii.gz.hirescam.nii.gz"))
    np.testing.assert_allclose(written.affine, AFFINE, atol=1e-6)
    cam = np.asarray(written.dataobj)
    assert cam.shape == data.shape and np.isfinite(cam).all()
    block = np.zeros(data.shape, bool)
    block[8:16, 16:32, 24:36] = True
    assert cam[block].sum() / cam.sum() > 0.85  # trilinear spread over the block's faces: a little outside
    assert (out / "ct.nii.gz.hirescam.png").read_bytes().startswith(b"\x89PNG")


def test_what_a_3d_run_cannot_take_is_one_line_each(run_cli, tmp_path, in_test_folder) -> None:
    (Path.cwd() / "net.py").write_text(NET)
    scan(Path.cwd() / "ct.nii.gz", (8, 8, 8))
    still = write_image(Path.cwd() / "still.png", 32, 32)
    result = run_cli("explain", still, "ct.nii.gz", *MODEL, "-o", tmp_path / "out", "--json")
    records = result.records()
    assert result.code == 1 and records[1]["ok"] is True
    assert records[0]["error"] == f"{still}: the model takes clips of 16 frames (N×3×T×H×W): give it videos"
    clash = run_cli("explain", "ct.nii.gz", *MODEL, "--clip-len", 8, "-o", tmp_path / "out")
    assert clash.code == 2 and "--input-size says 16 frames or slices deep, --clip-len 8 another: give one" in clash.stderr


def test_a_volume_for_a_2d_model_without_slices_says_both_ways(run_cli, tmp_path, in_test_folder) -> None:
    from conftest import EXAMPLE_MODEL

    scan(Path.cwd() / "ct.nii.gz", (8, 8, 8))
    result = run_cli("explain", "ct.nii.gz", *EXAMPLE_MODEL, "-o", tmp_path / "out", "--json")
    assert result.records()[0]["error"] == (
        "ct.nii.gz: a volume: give --slices (axial, coronal or sagittal) to explain it slice by slice with a 2-D model, "
        "or a 3-D model's --input-size DxHxW"
    )


def test_the_readme_phantom_puts_its_map_on_the_lesion(run_cli, tmp_path, in_test_folder) -> None:
    """examples/phantom.py as the README runs it: the map volume lies on the lesion, in the scan's own space."""
    sys.path.insert(0, str(EXAMPLES))
    import phantom

    hu, affine = phantom.phantom()
    nibabel.save(nibabel.Nifti1Image(hu, affine), "phantom.nii.gz")
    model = f"{EXAMPLES / 'phantom.py'}:build"
    args = ("--input-size", "32x96x96", "--window", "40,400", "--mean", "0", "--std", "1", "--method", "hirescam")
    result = run_cli("explain", "phantom.nii.gz", "--model", model, *args, "-o", tmp_path / "out", "--json")
    assert result.code == 0, result.stderr
    written = nibabel.load(str(tmp_path / "out" / "phantom.nii.gz.hirescam.nii.gz"))
    np.testing.assert_allclose(written.affine, affine, atol=1e-6)
    cam = np.asarray(written.dataobj)
    x, y, z = np.meshgrid(*(np.arange(n) for n in cam.shape), indexing="ij")
    mm = sum(((axis - c) * s) ** 2 for axis, c, s in zip((x, y, z), phantom.LESION, phantom.SPACING))
    near = mm <= (phantom.LESION_RADIUS_MM + 2 * max(phantom.SPACING)) ** 2  # the lesion and one map voxel around it
    assert cam[near].sum() / cam.sum() > 0.95
