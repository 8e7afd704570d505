"""Instance segmenters explained per detection (README: Detectors): Mask R-CNN and Ultralytics' Segment head.

Each detection's map is a detector's; its mask is read from the model as the
model's own library makes it (torchvision's probabilities at 0.5, Ultralytics'
`process_mask`), outlined in its colour in the pictures and measured in its
record (`mask_area`, `energy_in_mask`); a box-only detector's records say None.
Random weights throughout (offline): the masks mean nothing, their plumbing is
what is checked, and Ultralytics' masks against its own pipeline exactly.
"""

from __future__ import annotations

import contextlib
import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from conftest import require, write_image
from test_detectors import PassThroughFamily

# ---------------------------------------------------------------- pieces, without a model (fast)


def _masked(scores: list[float], pixels: torch.Tensor, made: list[list[int]]):
    """Detections whose masks say which of them were made (each call's indices into `made`)."""
    from gradcam_cli.found import Detections, Masks

    def make(index: torch.Tensor) -> torch.Tensor:
        made.append(index.tolist())
        return pixels[index]

    boxes = torch.tensor([[10.0 * i, 0.0, 10.0 * i + 8, 8.0] for i in range(len(scores))])
    score = torch.tensor(scores, requires_grad=True) * 1.0
    return Detections(boxes, score, torch.zeros(len(scores), dtype=torch.long), Masks(make, torch.arange(len(scores))))


def test_masks_are_made_only_for_the_kept_detections_when_they_go_to_the_writers() -> None:
    from gradcam_cli.cams.detections import DetectionTargets

    made: list[list[int]] = []
    pixels = torch.arange(4)[:, None, None] == torch.arange(4)[None, :, None].expand(4, 4, 5)  # mask i: row i
    targets = DetectionTargets(PassThroughFamily(), score_threshold=0.5, max_detections=2)
    reading = targets.read([_masked([0.2, 0.9, 0.6, 0.7], pixels, made)])
    assert not made  # reading keeps them unmade: a family reads far more detections than are explained
    (found,) = reading.found
    on_cpu = found.cpu()
    assert made == [[1, 3]]  # the two kept, highest score first
    assert torch.equal(on_cpu.masks.pixels(), pixels[[1, 3]]) and on_cpu.masks.pixels().dtype == torch.bool


class _Kept:
    """The Pictures a writer draws into, kept in memory (as the Python API keeps them)."""

    def __init__(self, folder: Path) -> None:
        from gradcam_cli.outputs.naming import OutputNamer
        from gradcam_cli.vocab import Colormap, Style

        self.namer = OutputNamer(folder, "hirescam")
        self.class_names = ["thing"]
        self.context: dict[str, Any] = {"method": "hirescam", "layers": ["layer"]}
        self.colormap, self.alpha, self.style, self.caption = Colormap.jet, 0.5, Style.overlay, False
        self.raw_norm, self.each = False, True
        self.pictures: dict[str, np.ndarray] = {}
        self.masks: dict[str, np.ndarray] = {}

    def save(self, path: Path, rgb: np.ndarray) -> None:
        self.pictures[path.name.split(".")[-2]] = rgb  # hirescam (the image's), det0, det1

    def keep_map(self, which: str, cam: np.ndarray) -> None:
        pass

    def keep_mask(self, which: str, mask: np.ndarray) -> None:
        self.masks[which] = mask


def _written(tmp_path: Path, masks: bool):
    """A 120x160 photo letterboxed into 128x128, two detections (a big box with a disc for its mask, a small one), the
    first one's map all inside its disc's lower half: the record and the pictures write_detections makes of them."""
    from gradcam_cli.found import Detections, Masks
    from gradcam_cli.geometry import plan_geometry
    from gradcam_cli.maps import CamBatch
    from gradcam_cli.model.data_config import DataConfig
    from gradcam_cli.outputs.detection_files import write_detections

    geometry = plan_geometry((120, 160), DataConfig((128, 128), (0, 0, 0), (1, 1, 1), fit="letterbox"))  # photo rows 16..112
    ys, xs = torch.meshgrid(torch.arange(128.0) + 0.5, torch.arange(128.0) + 0.5, indexing="ij")
    disc = (xs - 64) ** 2 + (ys - 64) ** 2 <= 24**2
    pixels = torch.stack([disc, torch.zeros_like(disc)])
    cams = torch.zeros(1, 2, 128, 128)
    cams[0, 0] = (disc & (ys > 64)).float()
    cams[0, 1, 100:110, 10:20] = 1.0
    found = Detections(
        torch.tensor([[24.0, 24.0, 104.0, 104.0], [8.0, 96.0, 24.0, 112.0]]), torch.tensor([0.9, 0.8]), torch.tensor([0, 0]),
        Masks.of(pixels) if masks else None,
    )  # fmt: skip
    batch = CamBatch(
        maps=cams, blank=torch.zeros(1, 2, dtype=torch.bool), finite=torch.ones(1, dtype=torch.bool), logits=torch.zeros(1, 2),
        targets=torch.zeros(1, 2, dtype=torch.long), found=[found.cpu()],
    )  # fmt: skip
    kept = _Kept(tmp_path)
    photo = np.full((120, 160, 3), 90, np.uint8)
    record = write_detections(kept, tmp_path / "photo.png", photo, geometry, batch, 0, Path("photo.png"))
    return record, kept


def _colour_inside(picture: np.ndarray, colour: tuple[int, int, int], box: tuple[int, int, int, int]) -> np.ndarray:
    """Where the picture has exactly `colour` inside `box` (x1, y1, x2, y2, photo pixels)."""
    x1, y1, x2, y2 = box
    return (picture[y1:y2, x1:x2] == np.array(colour, np.uint8)).all(-1)


def test_a_mask_is_outlined_in_its_detections_colour_and_measured(tmp_path: Path) -> None:
    from gradcam_cli.outputs.boxes import colour_of

    record, kept = _written(tmp_path, masks=True)
    first, second = record.detections
    assert record.input == str(tmp_path / "photo.png") and first.overlay == str(tmp_path / "photo.png.hirescam.det0.png")
    # the disc, radius 24 input pixels, is 30 photo pixels (160/128 a pixel): about pi * 30² of them
    assert first.mask_area == int(kept.masks["det0"].sum()) and abs(first.mask_area - np.pi * 30**2) < 0.02 * np.pi * 30**2
    assert kept.masks["det0"].shape == (120, 160) and first.energy_in_mask == pytest.approx(1.0, abs=0.02)
    assert second.mask_area == 0 and second.energy_in_mask is None  # an empty mask: nothing of its map inside it
    # the outline: the disc's edge, 30 photo pixels around (80, 60), far inside the box's own lines (50 pixels out)
    for picture in (kept.pictures["hirescam"], kept.pictures["det0"]):
        ring = _colour_inside(picture, colour_of(0), (40, 27, 120, 100))  # below its label
        rows, cols = np.nonzero(ring)
        distance = np.hypot(cols + 40.5 - 80, rows + 27.5 - 60)
        assert len(distance) > 100 and np.all(np.abs(distance - 30) < 3), distance


def test_a_box_only_detectors_records_say_none_and_draw_no_outline(tmp_path: Path) -> None:
    from gradcam_cli.outputs.boxes import colour_of
    from gradcam_cli.outputs.records import ImageRecord

    record, kept = _written(tmp_path, masks=False)
    assert [(d.mask_area, d.energy_in_mask) for d in record.detections] == [(None, None), (None, None)] and not kept.masks
    assert not _colour_inside(kept.pictures["hirescam"], colour_of(0), (40, 27, 120, 100)).any()  # only its box's lines
    assert ImageRecord.from_json(record.to_json()) == record
    assert '"mask_area": null, "energy_in_mask": null' in record.to_json()


# ---------------------------------------------------------------- Ultralytics' Segment head


def _ultralytics() -> object:
    from gradcam_cli.errors import UsageError
    from gradcam_cli.model.ultralytics_hub import import_ultralytics

    with contextlib.suppress(UsageError):
        import_ultralytics()  # quiet and offline, as the hub imports it
    return require("ultralytics")


@pytest.fixture(scope="module")
def v8n_seg():
    """yolov8n-seg.yaml as the CLI loads it, its weights spread (He's initialisation, class biases 0) so that scores differ
    from anchor to anchor and the NMS's order is the scores' (an untrained one scores about 1e-4 everywhere, in ties)."""
    _ultralytics()
    from torch import nn

    from gradcam_cli.model.load import load_model

    loaded = load_model("yolo:yolov8n-seg.yaml", pretrained=False)
    model, g = copy.deepcopy(loaded.model), torch.Generator().manual_seed(3)
    with torch.no_grad():
        for conv in (m for m in model.modules() if isinstance(m, nn.Conv2d) and m.weight.requires_grad):
            conv.weight.copy_(torch.randn(conv.weight.shape, generator=g) * (2 / conv.weight[0].numel()) ** 0.5)
        for level in model.model[-1].cv3:
            level[-1].bias.zero_()
    return loaded, model


def _segment_output(layout: str):
    """A Segment head's eval output on a 64x64 input (84 anchors: 8², 4², 2²; 3 classes, 4 prototypes of 16x16) in
    ultralytics 8.4's layout or 8.1-8.3's; "detect": 8.1-8.3's Detect head, its three levels' maps."""
    g = torch.Generator().manual_seed(5)
    anchors, classes, nm = 84, 3, 4
    centres, sizes = torch.rand(1, 2, anchors, generator=g) * 64, 8 + torch.rand(1, 2, anchors, generator=g) * 24
    scores, coefficients = torch.rand(1, classes, anchors, generator=g), torch.randn(1, nm, anchors, generator=g)
    protos = torch.randn(1, nm, 16, 16, generator=g)
    levels = [torch.zeros(1, 64 + classes, side, side) for side in (8, 4, 2)]
    y = torch.cat([centres, sizes, scores, coefficients], 1)
    if layout == "8.4":
        return (y, protos), {"boxes": torch.zeros(1, 64, anchors), "scores": torch.logit(scores), "mask_coefficient": coefficients}
    if layout == "8.3":
        return y, (levels, coefficients, protos)
    return y[:, : 4 + classes], levels


def test_both_layouts_of_a_segment_heads_output_give_the_same_masks() -> None:
    """8.4's `((y, protos), parts)` and 8.1-8.3's `(y, (levels, coefficients, protos))`; a Detect head's three levels'
    maps are no Segment head's (no masks), and the same detections."""
    from gradcam_cli.model.yolo_detectors import YoloDetectors

    family = YoloDetectors()
    (new,), (old,), (plain,) = (family.read(_segment_output(layout), "m", (64, 64)) for layout in ("8.4", "8.3", "detect"))
    assert torch.equal(new.boxes, old.boxes) and torch.equal(new.boxes, plain.boxes) and plain.masks is None
    assert new.masks.pixels().shape == (len(new), 64, 64) and torch.equal(new.masks.pixels(), old.masks.pixels())
    assert new.masks.pixels().any()


def test_a_segment_head_loads_as_a_detector(v8n_seg) -> None:
    loaded, _ = v8n_seg
    head = loaded.model.model[-1]
    assert type(head).__name__ == "Segment" and loaded.detector.name == "ultralytics" and loaded.found_task == "detect"
    assert loaded.detector.default_layers(loaded.model) == ["model.15", "model.18", "model.21"]
    assert loaded.detector.num_classes(loaded.model) == 80


def _rows(boxes: torch.Tensor, scores: torch.Tensor, labels: torch.Tensor) -> list[tuple[float, ...]]:
    return [tuple(row) for row in torch.cat([boxes, scores[:, None], labels[:, None].float()], 1).tolist()]


def test_its_masks_are_ultralytics_own(v8n_seg) -> None:
    """Our detections and masks equal Ultralytics' predictor-free pipeline's on the same input: its non_max_suppression
    (the mask coefficients as extra columns, conf 0, IoU 0.7, 300 kept) then process_mask at the input's size, as its
    SegmentationPredictor does; every one of the 300, and the kept ones as a run makes them."""
    from ultralytics.utils.nms import non_max_suppression
    from ultralytics.utils.ops import process_mask

    from gradcam_cli.cams.detections import DetectionTargets

    loaded, model = v8n_seg
    x = torch.rand(1, 3, 320, 320, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        output = model(x)
    (found,) = loaded.detector.read(output, "yolov8n-seg", (320, 320))
    (pred,) = non_max_suppression(output[0], conf_thres=0.0, iou_thres=0.7, max_det=300, nc=80)
    theirs = process_mask(output[0][1][0], pred[:, 6:], pred[:, :4], (320, 320), upsample=True).bool()
    ours = found.masks.pixels()
    assert len(found) == len(pred) == 300 and ours.shape == theirs.shape == (300, 320, 320) and theirs.any()
    at = {row: i for i, row in enumerate(_rows(pred[:, :4], pred[:, 4], pred[:, 5]))}
    same = [at[row] for row in _rows(found.boxes, found.scores, found.labels)]  # each of ours among theirs (ties may swap)
    assert sorted(same) == list(range(300)) and torch.equal(ours, theirs[same])
    targets = DetectionTargets(loaded.detector, score_threshold=0.0, max_detections=5, input_hw=(320, 320))
    (kept,) = targets.read(output).found
    index = [at[row] for row in _rows(kept.boxes, kept.scores, kept.labels)]
    assert torch.equal(kept.cpu().masks.pixels(), theirs[index])


def test_every_candidate_reads_no_masks(v8n_seg) -> None:
    loaded, model = v8n_seg
    with torch.no_grad():
        output = model(torch.rand(1, 3, 128, 128, generator=torch.Generator().manual_seed(2)))
    with loaded.detector.every_candidate(model):
        (every,) = loaded.detector.read(output, "yolov8n-seg", (128, 128))
    assert len(every) == 16**2 + 8**2 + 4**2 and every.masks is None


@pytest.mark.slow  # builds yolov8n-seg and runs it with one backward per detection
def test_the_cli_explains_a_yolo_segmenters_detections_with_their_masks(run_cli, tmp_path: Path) -> None:
    _ultralytics()
    photo = write_image(tmp_path / "photo.png", 320, 240, seed=7)
    result = run_cli("explain", photo, "--model", "yolo:yolov8n-seg.yaml", "--no-pretrained", "--input-size", "320x320",
                     "--score-threshold", "0", "--max-detections", "3", "--each", "--json", "-o", tmp_path / "out")  # fmt: skip
    assert result.code == 0, result.stderr
    (record,) = result.records()
    assert len(record["detections"]) == 3 and len(record["outputs"]) == 4
    for detection in record["detections"]:
        x1, y1, x2, y2 = detection["box"]
        assert 0 <= detection["mask_area"] <= (x2 - x1 + 2) * (y2 - y1 + 2)  # cropped to its box, as Ultralytics crops
        assert detection["energy_in_mask"] is None or 0 <= detection["energy_in_mask"] <= 1
    assert any(d["mask_area"] > 0 for d in record["detections"])


# ---------------------------------------------------------------- torchvision's Mask R-CNN


def _grown(pixels: np.ndarray, by: int) -> np.ndarray:
    """A bool picture's pixels grown by `by` each way (a square's dilation); beyond its edge counts as False."""
    padded = np.pad(pixels, by)
    shifts = [np.roll(np.roll(padded, dy, 0), dx, 1) for dy in range(-by, by + 1) for dx in range(-by, by + 1)]
    return np.stack(shifts).any(0)[by:-by, by:-by]


@pytest.mark.slow  # builds Mask R-CNN (ResNet-50) with random weights and explains four detections at 224x224
def test_mask_rcnn_outlines_and_measures_each_detections_mask(tmp_path: Path) -> None:
    import gradcam_cli
    from gradcam_cli.outputs.boxes import DrawnBox, colour_of, draw_boxes
    from gradcam_cli.outputs.detection_files import label_of

    kwargs = {"box_score_thresh": 0.0, "min_size": 224, "max_size": 224}
    ready = gradcam_cli.load_model("torchvision:maskrcnn_resnet50_fpn", pretrained=False, device="cpu", model_kwargs=kwargs)
    photo = write_image(tmp_path / "photo.png", 240, 180, seed=4)
    result = gradcam_cli.explain(photo, ready, score_threshold=0.0, max_detections=4)
    assert len(result.detections) == 4
    outlined = 0
    for found in result.detections:
        record, mask = found.record, found.mask
        assert mask is not None and mask.shape == (180, 240) and record.mask_area == int(mask.sum())
        if record.mask_area:
            assert record.energy_in_mask == pytest.approx(float(found.map[mask].sum() / found.map.sum()), abs=1e-5)
        # its own overlay: its colour beyond what its box and label draw lies on its mask's edge
        overlay = np.asarray(found.overlay)
        drawn = DrawnBox(found.box, label_of(ready.class_names, found.class_index, found.score), record.rank)
        footprint = _grown(draw_boxes(np.zeros_like(overlay), [drawn]).any(-1), 1)  # a pixel more: the record's box is rounded
        extra = (overlay == np.array(colour_of(record.rank), np.uint8)).all(-1) & ~footprint
        edge = mask & _grown(~mask, 1)
        assert not (extra & ~_grown(edge, 2)).any()
        outlined += int(extra.any())
    assert outlined  # at least one mask's edge runs off its box's lines
    model = ready.model
    with ready.detector.every_candidate(model), torch.no_grad():
        (every,) = model([torch.rand(3, 224, 224)])
    assert "masks" not in every and len(every["boxes"]) > 1000 and model.roi_heads.mask_roi_pool is not None
