"""A 3-D segmenter's volume (issue 26): its regions found in the volume's predicted labels, each region's map a NIfTI
with the scan's affine and most of its energy in the region, the labels a NIfTI equal to the prediction, the record's
segments; what a volume's regions cannot take yet, one line each."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from conftest import require

nibabel = require("nibabel")

# A 3-D segmenter (one channel, as CT networks are): features x, x, 1 - x, 1 - x (1x1x1 convolutions) and a head whose
# class 1 is 2x - 1 and class 0 is 1 - 2x: class 1 exactly where a voxel is brighter than 0.5. With `pool`, its scores
# come at half the input's size, as a strided U-Net's might.
NET = """
import torch
from torch import nn


class BrightSegmenter(nn.Module):
    def __init__(self, pool):
        super().__init__()
        self.features = nn.Sequential(nn.Conv3d(1, 4, 1), nn.ReLU())
        self.head = nn.Conv3d(4, 2, 1)
        self.pool = nn.AvgPool3d(2) if pool else nn.Identity()

    def forward(self, x):
        return self.pool(self.head(self.features(x)))


def build(pool=False, binary=False):
    net = BrightSegmenter(pool)
    if binary:  # one channel, 2x - 1: a binary segmenter whose one class is the bright voxels
        net.head = nn.Conv3d(4, 1, 1)
    with torch.no_grad():
        net.features[0].weight.copy_(torch.tensor([1.0, 1.0, -1.0, -1.0]).view(4, 1, 1, 1, 1))
        net.features[0].bias.copy_(torch.tensor([0.0, 0.0, 1.0, 1.0]))
        net.head.weight.zero_()
        net.head.weight[-1, :2] = 1.0
        net.head.weight[0, 2:] += 0.0 if binary else 1.0
        net.head.bias.fill_(-1.0)
    return net
"""
AFFINE = np.array([[0.0, 0.0, -1.5, 30.0], [-0.9, 0.0, 0.0, 12.0], [0.0, 1.1, 0.0, -40.0], [0, 0, 0, 1.0]])  # permuted, flipped
SHAPE = (24, 32, 40)
BLOCK = (slice(4, 12), slice(8, 20), slice(10, 30))  # the bright voxels: on even voxels, so halving keeps them exact
# the input is the scan halved each way (window 200,400: 0 → 0, 400 → 1; mean 0, std 1)
MODEL = ("--model", "net.py:build", "--input-size", "12x16x20", "--window", "200,400", "--mean", "0", "--std", "1")


def scan(path: Path) -> np.ndarray:
    """A dark volume (0) with a bright block (400); returns the labels the segmenter predicts: 1 in the block."""
    data = np.zeros(SHAPE, np.float32)
    data[BLOCK] = 400.0
    nibabel.save(nibabel.Nifti1Image(data, AFFINE), str(path))
    labels = np.zeros(SHAPE, np.uint8)
    labels[BLOCK] = 1
    return labels


def loaded(path: Path) -> tuple[np.ndarray, np.ndarray]:
    image = nibabel.load(str(path))
    return np.asarray(image.dataobj), image.affine


def test_each_region_of_a_3d_segmenter_has_its_map_volume_and_the_labels_are_its_prediction(run_cli, tmp_path, in_test_folder) -> None:
    (Path.cwd() / "net.py").write_text(NET)
    truth = scan(Path.cwd() / "ct.nii.gz")
    out = tmp_path / "out"
    result = run_cli("explain", "ct.nii.gz", *MODEL, "-o", out, "--json")
    assert result.code == 0, result.stderr
    (record,) = result.records()
    assert record["ok"] and record["target"] == "segment" and record["layers"] == ["features"] and record["method"] == "hirescam"
    stem = str(out / "ct.nii.gz.hirescam")
    regions = [f"{stem}.seg{k}.{ext}" for k in (0, 1) for ext in ("nii.gz", "png")]
    assert record["outputs"] == [f"{stem}.labels.nii.gz", *regions]
    labels, affine = loaded(out / "ct.nii.gz.hirescam.labels.nii.gz")
    assert labels.dtype == np.uint8 and np.array_equal(labels, truth)
    np.testing.assert_allclose(affine, AFFINE, atol=1e-6)
    background, bright = record["segments"]
    for segment, region, model_voxels in ((background, truth == 0, 12 * 16 * 20 - 4 * 6 * 10), (bright, truth == 1, 4 * 6 * 10)):
        cam, affine = loaded(Path(f"{stem}.seg{segment['rank']}.nii.gz"))
        np.testing.assert_allclose(affine, AFFINE, atol=1e-6)
        assert cam.shape == SHAPE and np.isfinite(cam).all()
        energy = cam[region].sum() / cam.sum()
        assert energy > 0.85  # a trilinear spread over the block's faces: a little outside
        assert segment["energy_in_region"] == round(float(energy), 6)
        assert segment["class_index"] == int(region[BLOCK].all()) and segment["region"] == "predicted" and not segment["blank"]
        assert segment["area"] == int(region.sum()) and segment["area_fraction"] == round(region.mean(), 6)
        assert segment["score"] == model_voxels  # its score 1 at each of its input's voxels, summed
        assert segment["mean_probability"] == round(1 / (1 + np.exp(-2.0)), 6)  # the softmax of 1 against -1
        assert segment["overlay"] == f"{stem}.seg{segment['rank']}.png"
        assert Path(segment["overlay"]).read_bytes().startswith(b"\x89PNG")


def test_classes_pick_a_3d_segmenters_regions(run_cli, tmp_path, in_test_folder) -> None:
    (Path.cwd() / "net.py").write_text(NET)
    truth = scan(Path.cwd() / "ct.nii.gz")
    out = tmp_path / "out"
    result = run_cli("explain", "ct.nii.gz", *MODEL, "--class", "1", "-o", out, "--json")
    assert result.code == 0, result.stderr
    (segment,) = result.records()[0]["segments"]
    assert segment["class_index"] == 1 and segment["area"] == int(truth.sum())
    assert not (out / "ct.nii.gz.hirescam.seg1.nii.gz").exists()
    labels, _ = loaded(out / "ct.nii.gz.hirescam.labels.nii.gz")
    assert np.array_equal(labels, truth)  # the labels are the whole prediction, whichever classes are explained
    small = run_cli("explain", "ct.nii.gz", *MODEL, "--min-area", "0.1", "-o", tmp_path / "small", "--json")
    assert [s["class_index"] for s in small.records()[0]["segments"]] == [0]  # the block is 0.0625 of the volume


def test_scores_smaller_than_a_volume_are_resized_to_it_trilinearly(run_cli, tmp_path, in_test_folder) -> None:
    """Scores at half the input's size (6x8x10 for 12x16x20) are read at the input's: the block found where it is."""
    (Path.cwd() / "net.py").write_text(NET)
    truth = scan(Path.cwd() / "ct.nii.gz")
    out = tmp_path / "out"
    result = run_cli("explain", "ct.nii.gz", *MODEL, "--model-kwargs", "pool=true", "--class", "1", "-o", out, "--json")
    assert result.code == 0, result.stderr
    (segment,) = result.records()[0]["segments"]
    labels, _ = loaded(out / "ct.nii.gz.hirescam.labels.nii.gz")
    found, block = labels == 1, truth == 1
    assert (found & block).sum() / (found | block).sum() > 0.7 and segment["area"] == int(found.sum())
    cam, _ = loaded(out / "ct.nii.gz.hirescam.seg0.nii.gz")
    assert cam[found].sum() / cam.sum() > 0.8


def test_a_binary_3d_segmenters_labels_are_its_mask(run_cli, tmp_path, in_test_folder) -> None:
    """One channel read by a sigmoid: its one class the bright block, the labels NIfTI its mask (1 in it, 0 elsewhere)."""
    (Path.cwd() / "net.py").write_text(NET)
    truth = scan(Path.cwd() / "ct.nii.gz")
    out = tmp_path / "out"
    result = run_cli("explain", "ct.nii.gz", *MODEL, "--model-kwargs", "binary=true", "-o", out, "--json")
    assert result.code == 0, result.stderr
    (segment,) = result.records()[0]["segments"]
    assert segment["class_index"] == 0 and segment["area"] == int(truth.sum())
    labels, _ = loaded(out / "ct.nii.gz.hirescam.labels.nii.gz")
    assert labels.dtype == np.uint8 and np.array_equal(labels, truth)


def test_what_a_volumes_regions_cannot_take_yet_is_one_line_each(run_cli, tmp_path, in_test_folder) -> None:
    (Path.cwd() / "net.py").write_text(NET)
    scan(Path.cwd() / "ct.nii.gz")
    (Path.cwd() / "masks").mkdir()
    Image.fromarray(np.zeros((8, 8), np.uint8)).save(Path.cwd() / "masks" / "ct.png")  # a folder of an image's masks
    truth = run_cli("explain", "ct.nii.gz", *MODEL, "--truth", "masks", "-o", tmp_path / "out", "--json")
    assert truth.records()[0]["error"] == (
        "ct.nii.gz: --truth's masks are images'; a volume's regions are the 3-D segmenter's predicted ones (leave --truth out)"
    )
    region = run_cli("explain", "ct.nii.gz", *MODEL, "--region", "0,0,4,4", "-o", tmp_path / "out", "--json")
    assert region.records()[0]["error"] == (
        "ct.nii.gz: --region and --mask name a region of an image; a volume's regions are the 3-D segmenter's predicted ones"
    )
    each = run_cli("explain", "ct.nii.gz", *MODEL, "--each", "-o", tmp_path / "out", "--json")
    assert each.records()[0]["error"] == (
        "ct.nii.gz: --each does not apply to volumes: each region's map is its own NIfTI and montage already"
    )
    assert not (tmp_path / "out" / "ct.nii.gz.hirescam.labels.nii.gz").exists()


def test_a_3d_segmenters_regions_are_report_cards_with_their_montages(run_cli, tmp_path, in_test_folder) -> None:
    """Not a volume card (the labels NIfTI is no picture): a card per region, each its montage's thumbnail."""
    (Path.cwd() / "net.py").write_text(NET)
    scan(Path.cwd() / "ct.nii.gz")
    out = tmp_path / "out"
    result = run_cli("explain", "ct.nii.gz", *MODEL, "-o", out, "--report", "--json")
    assert result.code == 0 and "no picture" not in result.stderr, result.stderr
    data = (out / "report" / "data.js").read_text()
    assert "ct.nii.gz.hirescam.seg0.png" in data and "ct.nii.gz.hirescam.seg1.png" in data
    assert len(list((out / "report" / "thumbs").iterdir())) == 2
