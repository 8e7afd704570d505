"""The shipped example segmenter (examples/shapes_segmenter_model) and the scenes it learns from.

Nothing here trains: the scene checks need numpy + Pillow only, and the
segmenter is the shipped weights run once on six small example scenes
(about a second on CPU), so all of it stays in the fast tier.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
from PIL import Image

from conftest import EXAMPLES

MODEL_DIR = EXAMPLES / "shapes_segmenter_model"
WEIGHTS = MODEL_DIR / "shapes_segmenter.safetensors"
LABELS = MODEL_DIR / "labels.txt"
SCENES = EXAMPLES / "shapes_segmentation"
# Measured with the shipped weights on these six scenes: mIoU 0.953 (background
# 0.995, circle 0.971, square 0.965, triangle 0.955, star 0.878); 0.950 on the
# training script's 200 validation scenes.  A floor of 0.90 leaves room for a
# torch or Pillow update moving boundary pixels (a class must lose about 0.06
# IoU on average to fail), while the mistakes this guards against fall below
# it: inputs in [0, 1] instead of normalised to [-1, 1] give 0.835, BatchNorm
# left in training mode 0.71, and a wrong class order far less.
MIOU_FLOOR = 0.90


def _import(name: str):
    saved = list(sys.path)
    sys.path.insert(0, str(EXAMPLES))
    try:
        return __import__(name)
    finally:
        sys.path[:] = saved  # the training script adds examples/ to the path itself


def test_segmentation_scene_mask_is_the_shapes_drawn() -> None:
    """Each placed shape's class covers pixels inside its box; background is the majority; the image is the detection scene's."""
    shapes = _import("shapes")
    for seed in range(8):
        image, mask = shapes.make_segmentation_scene(np.random.default_rng(seed), 256, 192)
        same, objects = shapes.make_detection_scene(np.random.default_rng(seed), 256, 192)
        assert np.array_equal(np.asarray(image), np.asarray(same))  # one random stream for both kinds of scene
        assert mask.shape == (192, 256) and mask.dtype == np.uint8
        assert (mask == 0).mean() > 0.5
        assert set(np.unique(mask).tolist()) == {0} | {cls + 1 for cls, _ in objects}
        for cls, (x0, y0, x1, y1) in objects:
            inside = mask[y0:y1, x0:x1]
            # the box is the tight box of the pasted pixels: each edge row and column holds some of them
            assert (inside[0] == cls + 1).any() and (inside[-1] == cls + 1).any()
            assert (inside[:, 0] == cls + 1).any() and (inside[:, -1] == cls + 1).any()
        ys, xs = np.nonzero(mask)
        boxes = [b for _, b in objects]
        assert all(any(x0 <= x < x1 and y0 <= y < y1 for x0, y0, x1, y1 in boxes) for x, y in zip(xs, ys))


def test_segmentation_scene_is_deterministic_and_rejects_bad_arguments() -> None:
    shapes = _import("shapes")
    a_img, a_mask = shapes.make_segmentation_scene(np.random.default_rng(5), 160, 160)
    b_img, b_mask = shapes.make_segmentation_scene(np.random.default_rng(5), 160, 160)
    assert np.array_equal(a_mask, b_mask) and np.array_equal(np.asarray(a_img), np.asarray(b_img))
    assert not np.array_equal(a_mask, shapes.make_segmentation_scene(np.random.default_rng(6), 160, 160)[1])
    with pytest.raises(ValueError):
        shapes.make_segmentation_scene(np.random.default_rng(0), 8, 100)
    with pytest.raises(ValueError):
        shapes.make_segmentation_scene(np.random.default_rng(0), 100, 100, count_range=(0, 2))


def test_iou_by_hand() -> None:
    import torch

    seg = _import("shapes_segmenter")
    truth = torch.tensor([[0, 0, 1, 1], [0, 0, 2, 2]])
    pred = torch.tensor([[0, 0, 1, 2], [0, 0, 2, 2]])
    m = seg.iou_from_confusion(seg.confusion(pred, truth, 5))
    # background 4/4; circle 1 of 2 truth pixels, no extra: 1/2; square 2 of 2 plus one extra: 2/3; triangle, star absent
    assert m["iou"][:3] == pytest.approx([1.0, 0.5, 2 / 3])
    assert np.isnan(m["iou"][3]) and np.isnan(m["iou"][4])
    assert m["mIoU"] == pytest.approx((1 + 0.5 + 2 / 3) / 3)


def _example_scenes() -> list[tuple[np.ndarray, np.ndarray]]:
    names = sorted(p.stem for p in (SCENES / "images").glob("*.png"))
    assert len(names) == 6 and names == sorted(p.stem for p in (SCENES / "masks").glob("*.png"))
    out = []
    for name in names:
        image, mask = Image.open(SCENES / "images" / f"{name}.png"), Image.open(SCENES / "masks" / f"{name}.png")
        assert image.mode == "RGB" and mask.mode == "L" and image.size == mask.size
        out.append((np.asarray(image), np.asarray(mask)))
    return out


def test_example_scenes_are_what_the_script_writes(tmp_path) -> None:
    """examples/shapes_segmentation is reproducible: train_example_segmenter.py --examples writes the same files."""
    train = _import("train_example_segmenter")
    train.write_examples(tmp_path)
    for kind in ("images", "masks"):
        for path in sorted((SCENES / kind).glob("*.png")):
            assert np.array_equal(np.asarray(Image.open(path)), np.asarray(Image.open(tmp_path / kind / path.name))), path


def test_shipped_segmenter_segments_the_example_scenes() -> None:
    import torch
    from safetensors.torch import load_file

    shapes, seg = _import("shapes"), _import("shapes_segmenter")
    assert LABELS.read_text().split() == ["background", *shapes.CLASSES]
    model = seg.build(5)
    model.load_state_dict(load_file(str(WEIGHTS)), strict=True)
    model.eval()
    scenes = [(torch.from_numpy(img.copy()).permute(2, 0, 1), torch.from_numpy(mask.copy())) for img, mask in _example_scenes()]
    conf = torch.zeros(5, 5, dtype=torch.long)
    with torch.inference_mode():
        for image, mask in scenes:  # one at a time: the scenes are 256x192 and 192x256
            logits = model(seg.normalise(image[None]))
            assert logits.shape == (1, 5, *mask.shape)
            conf += seg.confusion(logits.argmax(1), mask, 5)
    m = seg.iou_from_confusion(conf)
    assert not any(np.isnan(m["iou"])), m  # every class is in the example scenes
    assert m["mIoU"] >= MIOU_FLOOR, m
