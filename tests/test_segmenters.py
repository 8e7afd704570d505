"""Segmentation models: regions as targets, each image its own, binary outputs, truth masks, and one line per bad input.

The networks here are written so the answer is known: which input pixels a
class's score at each pixel reads is in the test (1x1 convolutions with set
weights, or a score read from a known box), so a map that is honest must lie
there, and nowhere else.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import require
from gradcam_cli.cams.engine import compute_cams
from gradcam_cli.cams.methods import get_method
from gradcam_cli.cams.segments import SegmentTargets
from gradcam_cli.layers.paths import resolve_layers
from gradcam_cli.maps import CamOptions
from gradcam_cli.model.segmenters import Segmenter
from gradcam_cli.vocab import Norm

NETS = '''
import torch
from torch import nn


def identity():
    """A 1x1 convolution that passes each colour channel through: the layer the maps are taken at."""
    conv = nn.Conv2d(3, 3, 1)
    with torch.no_grad():
        conv.weight.copy_(torch.eye(3)[:, :, None, None])
        conv.bias.zero_()
    return conv


class Colours(nn.Module):
    """0 background, 1 where red beats green, 2 where green beats red: every pixel read where it is (1x1 convs)."""

    def __init__(self):
        super().__init__()
        self.features = identity()
        self.head = nn.Conv2d(3, 3, 1)
        with torch.no_grad():
            self.head.weight.copy_(torch.tensor([[0.0, 0, 0], [4, -4, 0], [-4, 4, 0]])[:, :, None, None])
            self.head.bias.copy_(torch.tensor([1.0, 0, 0]))

    def forward(self, x):
        return self.head(torch.relu(self.features(x)))


class FromBox(nn.Module):
    """Class 1's score at every pixel is the mean red of the box rows 4:12, columns 4:12 (of 32x32): nothing else."""

    def __init__(self):
        super().__init__()
        self.features = identity()

    def forward(self, x):
        red = torch.relu(self.features(x))[:, 0:1]
        score = red[:, :, 4:12, 4:12].mean(dim=(2, 3), keepdim=True).expand(-1, -1, *x.shape[-2:])
        return torch.cat([torch.full_like(score, 0.1), score], dim=1)


class Binary(nn.Module):
    """One logit per pixel: red above a half is the foreground."""

    def __init__(self):
        super().__init__()
        self.features = identity()

    def forward(self, x):
        return 4 * (torch.relu(self.features(x))[:, 0:1] - 0.5)
'''

SIZE = ("--input-size", "32", "--mean", "0", "--std", "1")


@pytest.fixture
def nets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The networks above in `nets.py`, and 128x128 pictures of squares (the input is 32x32: a quarter): red at
    rows/columns 16:48 (the input's 4:12) and green at 80:112 (20:28) in `two.png`, red in both places (`reds.png`),
    green only (`green.png`)."""
    (tmp_path / "nets.py").write_text(NETS)
    for name, squares in {"two.png": [(0, 4), (1, 20)], "reds.png": [(0, 4), (0, 20)], "green.png": [(1, 20)]}.items():
        picture = np.zeros((128, 128, 3), np.uint8)
        for channel, at in squares:
            picture[4 * at : 4 * at + 32, 4 * at : 4 * at + 32, channel] = 255
        Image.fromarray(picture).save(tmp_path / name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _map(path: Path) -> np.ndarray:
    """A written overlay's heat map (drawn with ⟨alpha=1⟩: the map alone), read back as red minus blue (jet: high is red,
    low blue: a hot map reads above 100, a cold one below -100)."""
    rgb = np.asarray(Image.open(path).convert("RGB")).astype(np.float32)
    return rgb[..., 0] - rgb[..., 2]


def _records(result) -> list[dict]:
    assert result.code == 0, result.stderr
    return result.records()


def test_a_model_whose_scores_are_maps_is_a_segmenter_and_every_class_present_gets_its_region(run_cli, nets) -> None:
    records = _records(run_cli("explain", "two.png", "--model", "nets.py:Colours", *SIZE, "-o", "out", "--json", "--each"))
    (record,) = records
    assert record["target"] == "segment" and record["layers"] == ["features"]
    regions = {s["class_index"]: s for s in record["segments"]}
    assert sorted(regions) == [0, 1, 2]  # no class names: class 0 is no known background, so it is explained too
    assert regions[1]["area"] == 1024 and regions[2]["area"] == 1024 and regions[0]["area"] == 128 * 128 - 2048
    assert regions[1]["region"] == "predicted" and 0.9 < regions[1]["mean_probability"] <= 1
    # each class's map lies in its own square: the map at the input's 32 px, resized bilinearly onto the photo's 128,
    # spreads across the square's edge by half an input pixel (2 photo pixels), a few percent of its energy
    assert all(s["energy_in_region"] > 0.85 for s in (regions[1], regions[2]))
    names = sorted(Path(p).name for p in record["outputs"])
    assert names == ["two.png.hirescam.png", "two.png.hirescam.seg0.png", "two.png.hirescam.seg1.png", "two.png.hirescam.seg2.png"]


def test_a_region_target_is_honest_its_map_lies_where_the_score_reads(run_cli, nets) -> None:
    """FromBox's class 1 reads only the box 4:12; the red square at 20:28 is as bright but counts for nothing."""
    record = _records(run_cli("explain", "reds.png", "--model", "nets.py:FromBox", *SIZE, "-o", "out", "--json", "--class", "1",
                              "--each", "--alpha", "1"))[0]  # fmt: skip
    (segment,) = record["segments"]
    assert segment["class_index"] == 1 and segment["area"] == 128 * 128  # predicted everywhere: the box's red decides all
    heat = _map(Path(segment["overlay"]))
    assert heat[20:44, 20:44].mean() > 100 and heat[84:108, 84:108].mean() < -100  # hot on the box read, cold on the other


def test_a_region_option_ignores_evidence_for_pixels_outside_it(run_cli, nets) -> None:
    """Both red squares are class 1; the score summed over a box around the first has no evidence in the second."""
    whole = _records(run_cli("explain", "reds.png", "--model", "nets.py:Colours", *SIZE, "-o", "a", "--json", "--class", "1",
                             "--each", "--alpha", "1"))[0]  # fmt: skip
    boxed = _records(run_cli("explain", "reds.png", "--model", "nets.py:Colours", *SIZE, "-o", "b", "--json", "--class", "1",
                             "--each", "--region", "8,8,56,56", "--alpha", "1"))[0]  # fmt: skip
    everywhere, inside = _map(Path(whole["segments"][0]["overlay"])), _map(Path(boxed["segments"][0]["overlay"]))
    assert everywhere[20:44, 20:44].mean() > 100 and everywhere[84:108, 84:108].mean() > 100
    assert inside[20:44, 20:44].mean() > 100 and inside[84:108, 84:108].mean() < -100
    assert boxed["segments"][0]["region"] == "box" and boxed["segments"][0]["area"] == 48 * 48


def test_each_image_of_a_batch_gets_its_own_regions(run_cli, nets) -> None:
    records = _records(run_cli("explain", "two.png", "green.png", "--model", "nets.py:Colours", *SIZE, "-b", "2", "-o", "out",
                               "--json"))  # fmt: skip
    by_image = {Path(r["input"]).name: {s["class_index"]: s["area"] for s in r["segments"]} for r in records}
    assert by_image == {"two.png": {0: 14336, 1: 1024, 2: 1024}, "green.png": {0: 15360, 2: 1024}}


def test_a_binary_segmenter_explains_its_foreground_and_negative_is_minus_it(run_cli, nets) -> None:
    record = _records(run_cli("explain", "two.png", "--model", "nets.py:Binary", *SIZE, "-o", "out", "--json"))[0]
    (segment,) = record["segments"]
    assert (segment["class_index"], segment["area"], segment["region"]) == (0, 1024, "predicted")
    negative = _records(run_cli("explain", "two.png", "--model", "nets.py:Binary", *SIZE, "-o", "neg", "--json", "--negative"))[0]
    assert negative["target"] == "segment, negative"
    import sys

    sys.path.insert(0, str(nets))
    try:
        from nets import Binary  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(nets))
    model = Binary().eval()
    x = torch.from_numpy(np.asarray(Image.open(nets / "two.png").resize((32, 32)), np.float32).transpose(2, 0, 1)[None] / 255)
    layers = resolve_layers(model, ["features"])
    targets = SegmentTargets(Segmenter(1), (32, 32))
    signed = [
        compute_cams(model, x, layers, get_method("hirescam"), targets, options=CamOptions(relu=False, norm=Norm.none, negative=flip))
        for flip in (False, True)
    ]
    assert signed[0].maps.abs().amax() > 0
    torch.testing.assert_close(signed[1].maps, -signed[0].maps, atol=0, rtol=0)


def test_truth_masks_give_iou_dice_and_the_missed_region_its_own_map(run_cli, nets) -> None:
    (nets / "masks").mkdir()
    truth = np.zeros((128, 128), np.uint8)
    truth[16:48, 16:48] = 1
    truth[80:112, 80:112] = 1  # the truth says both squares are red; the model sees green in the second
    Image.fromarray(truth).save(nets / "masks" / "two.png")
    record = _records(run_cli("explain", "two.png", "--model", "nets.py:Colours", *SIZE, "-o", "out", "--json", "--truth", "masks",
                              "--each"))[0]  # fmt: skip
    overlap = {o["class_index"]: o for o in record["overlap"]}
    assert overlap[1]["iou"] == pytest.approx(0.5) and overlap[1]["dice"] == pytest.approx(2 / 3)
    assert overlap[1]["missed_area"] == 1024 and overlap[2]["iou"] == 0.0
    missed = [s for s in record["segments"] if s["region"] == "missed"]
    assert [(s["class_index"], s["area"]) for s in missed] == [(1, 1024)]
    assert Path(missed[0]["overlay"]).name == "two.png.hirescam.miss0.png"
    assert missed[0]["score"] < 0  # "why not red here": the red score is low on the green square


def test_torchvision_segmenters_by_name_with_their_voc_classes(run_cli, tmp_path) -> None:
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (48, 64, 3), dtype=np.uint8)).save(tmp_path / "photo.png")
    result = run_cli("explain", tmp_path / "photo.png", "--model", "torchvision:deeplabv3_mobilenet_v3_large", "--no-pretrained",
                     "--input-size", "96", "--min-area", "0", "-o", tmp_path / "out", "--json")  # fmt: skip
    record = _records(result)[0]
    assert record["layers"] == ["backbone.16"] and record["source"] == "torchvision" and record["output"] == "out"
    asked = _records(run_cli("explain", tmp_path / "photo.png", "--model", "torchvision:deeplabv3_mobilenet_v3_large",
                             "--no-pretrained", "--input-size", "96", "--class", "__background__", "--region", "0,0,64,48", "-o",
                             tmp_path / "bg", "--json"))[0]  # fmt: skip
    # a background only when asked for; over a named region even where the model gives it no pixel ("why not here?")
    assert [(s["class_name"], s["region"]) for s in asked["segments"]] == [("__background__", "box")]
    names = {s["class_name"] for s in record["segments"]}
    assert names and "__background__" not in names and names <= {
        "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow", "diningtable", "dog", "horse",
        "motorbike", "person", "pottedplant", "sheep", "sofa", "train", "tvmonitor",
    }  # fmt: skip


@pytest.mark.slow  # pytorch-grad-cam imports matplotlib, which asks fc-list for the fonts
def test_parity_with_pytorch_grad_cams_semantic_segmentation_target() -> None:
    """The same model, layer and mask: our region's Grad-CAM equals pytorch-grad-cam's SemanticSegmentationTarget's."""
    require("pytorch_grad_cam")
    from pytorch_grad_cam import GradCAM
    from pytorch_grad_cam.utils.model_targets import SemanticSegmentationTarget
    from torchvision.models.segmentation import deeplabv3_mobilenet_v3_large

    torch.manual_seed(0)
    model = deeplabv3_mobilenet_v3_large(weights=None, weights_backbone=None).eval()

    class Out(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.model(x)["out"] * 1000  # random weights' scores are tiny: pytorch-grad-cam's 1e-7 in its
            # normalisation (max + 1e-7) would move its maps by 1e-4 of theirs; larger scores leave both maps as they are

    wrapped = Out().eval()
    x = torch.randn(1, 3, 96, 96, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        labels = wrapped(x).argmax(1)[0]
    c = int(labels.flatten().mode().values)
    mask = (labels == c).float().numpy()
    with GradCAM(model=wrapped, target_layers=[model.backbone["16"]]) as explainer:
        reference = explainer(input_tensor=x, targets=[SemanticSegmentationTarget(c, mask)])
    targets = SegmentTargets(Segmenter(21), (96, 96), classes=(c,))
    ours = compute_cams(wrapped, x, resolve_layers(wrapped, ["model.backbone.16"]), get_method("gradcam"), targets)
    assert ours.maps.shape == (1, 1, 96, 96) and float(ours.maps.amax()) > 0.99
    np.testing.assert_allclose(ours.maps[:, 0].numpy(), reference, atol=1e-4, rtol=0)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--min-area", "-0.1"], "--min-area -0.1: must be between 0 and 1"),
        (["--class", "zebra"], "--class 'zebra'"),
        (["--class", "7"], "class index 7 is out of range; the segmenter has 3 classes (0..2)"),
        (["--region", "1,2,3"], "--region '1,2,3' is not a region"),
        (["--region", "truth"], "--region truth sums each class's score over its true mask: give the masks with --truth"),
        (["--topk", "2"], "--topk picks classes of a classifier"),
        (["--score-threshold", "0.3"], "--score-threshold applies to detectors; this model is a segmenter"),
    ],
)
def test_a_bad_option_is_one_line(run_cli, nets, args, says) -> None:
    result = run_cli("explain", "two.png", "--model", "nets.py:Colours", *SIZE, "-o", "out", *args)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.code == 2 and len(lines) == 1 and says in lines[0], result.stderr
    assert not (nets / "out").exists()


def test_a_classifier_refuses_a_segmenters_options(run_cli, tmp_path) -> None:
    Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(tmp_path / "a.png")
    result = run_cli("explain", tmp_path / "a.png", "--model", "test_resnet", "--no-pretrained", "--min-area", "0.1", "-o", tmp_path / "o")
    assert result.code == 2 and "--min-area applies to segmenters; this model is a classifier" in result.stderr


def test_a_bad_image_input_is_its_own_error_and_the_others_are_done(run_cli, nets) -> None:
    """A --region outside one image, a --mask of another size, a truth mask with a class the model lacks: one line each."""
    Image.fromarray(np.zeros((16, 16, 3), np.uint8)).save(nets / "small.png")
    boxed = run_cli("explain", "two.png", "small.png", "--model", "nets.py:Colours", *SIZE, "-o", "a", "--json", "--region", "0,0,20,20")
    assert boxed.code == 1
    by_image = {Path(r["input"]).name: r for r in boxed.records()}
    assert by_image["two.png"]["ok"] and not by_image["small.png"]["ok"]
    assert "--region 0,0,20,20 lies outside this image (16x16 pixels)" in by_image["small.png"]["error"]
    Image.fromarray(np.full((128, 128), 255, np.uint8)).save(nets / "corner.png")
    masked = run_cli("explain", "two.png", "small.png", "--model", "nets.py:Colours", *SIZE, "-o", "b", "--json", "--mask", "corner.png")
    errors = {Path(r["input"]).name: r["error"] for r in masked.records()}
    assert errors["two.png"] is None and "--mask corner.png is 128x128 pixels but the image is 16x16" in errors["small.png"]
    (nets / "masks").mkdir()
    Image.fromarray(np.full((128, 128), 7, np.uint8)).save(nets / "masks" / "two.png")
    Image.fromarray(np.zeros((128, 128), np.uint8)).save(nets / "masks" / "green.png")
    truth = run_cli("explain", "two.png", "green.png", "--model", "nets.py:Colours", *SIZE, "-o", "c", "--json", "--truth", "masks")
    records = {Path(r["input"]).name: r for r in truth.records()}
    assert truth.code == 1 and records["green.png"]["ok"]
    assert "holds class 7; the model has 3 classes (0..2)" in records["two.png"]["error"]
    for result in (boxed, masked, truth):
        assert "Traceback" not in result.stderr
        assert all(len(json.dumps(r.get("error") or "").splitlines()) == 1 for r in result.records())


def test_gradcams_pooled_gradient_lights_what_the_region_leaves_out(run_cli, nets) -> None:
    """Why hirescam is a segmenter's default: gradcam's map of the boxed region lights the other red square too."""
    boxed = _records(run_cli("explain", "reds.png", "--model", "nets.py:Colours", *SIZE, "-o", "g", "--json", "--class", "1",
                             "--each", "--region", "8,8,56,56", "--alpha", "1", "--method", "gradcam"))[0]  # fmt: skip
    heat = _map(Path(boxed["segments"][0]["overlay"]))
    assert heat[20:44, 20:44].mean() > 100 and heat[84:108, 84:108].mean() > 100


def test_a_mask_file_and_the_true_mask_as_regions(run_cli, nets) -> None:
    corner = np.zeros((128, 128), np.uint8)
    corner[:64, :64] = 255  # the first square and some background
    Image.fromarray(corner).save(nets / "corner.png")
    masked = _records(run_cli("explain", "two.png", "--model", "nets.py:Colours", *SIZE, "-o", "m", "--json", "--mask", "corner.png"))[0]
    assert {(s["class_index"], s["region"], s["area"]) for s in masked["segments"]} == {(0, "mask", 4096), (1, "mask", 4096)}
    (nets / "masks").mkdir()
    truth = np.zeros((128, 128), np.uint8)
    truth[80:112, 16:48] = 2  # green, the truth says, where the picture is black
    Image.fromarray(truth).save(nets / "masks" / "two.png")
    record = _records(run_cli("explain", "two.png", "--model", "nets.py:Colours", *SIZE, "-o", "t", "--json", "--truth", "masks",
                              "--region", "truth", "--class", "2"))[0]  # fmt: skip
    assert [(s["class_index"], s["region"], s["area"]) for s in record["segments"]] == [(2, "truth", 1024)]
    unmasked = run_cli("explain", "two.png", "green.png", "--model", "nets.py:Colours", *SIZE, "-o", "u", "--json", "--truth",
                       "masks", "--region", "truth")  # fmt: skip
    errors = {Path(r["input"]).name: r["error"] for r in unmasked.records()}
    assert unmasked.code == 1 and errors["two.png"] is None and "--region truth: no mask in --truth names this image" in errors["green.png"]


def test_explain_and_compare_on_a_segmenter(run_cli, nets) -> None:
    import gradcam_cli

    ready = gradcam_cli.load_model("nets.py:Colours", input_hw=(32, 32), mean=0, std=1)
    explained = gradcam_cli.explain(str(nets / "two.png"), ready)
    assert explained.segments is not None and [r.class_index for r in explained.segments] == [0, 1, 2]
    red = explained.segments[1]
    assert red.kind == "predicted" and red.region.shape == (128, 128) and int(red.region.sum()) == 1024
    assert red.map.shape == (128, 128) and red.overlay.size == (128, 128) and explained.overlay.size == (128, 128)
    assert red.record.energy_in_region is not None and red.record.energy_in_region > 0.85
    compared = run_cli("compare", "two.png", "--model", "nets.py:Colours", *SIZE, "--methods", "gradcam,hirescam", "--layers",
                       "features", "--class", "2", "-o", "c", "--json")  # fmt: skip
    assert compared.code == 0, compared.stderr
    assert compared.records()[0]["class_index"] == 2 and Path(compared.records()[0]["output"]).exists()


@pytest.mark.parametrize(
    ("name", "layer"),
    [
        ("deeplabv3_mobilenet_v3_large", "backbone.16"),
        ("lraspp_mobilenet_v3_large", "backbone.16"),
        pytest.param("deeplabv3_resnet50", "backbone.layer4", marks=pytest.mark.slow),
        pytest.param("deeplabv3_resnet101", "backbone.layer4", marks=pytest.mark.slow),
        pytest.param("fcn_resnet50", "backbone.layer4", marks=pytest.mark.slow),
        pytest.param("fcn_resnet101", "backbone.layer4", marks=pytest.mark.slow),
    ],
)
def test_each_torchvision_segmenter_is_recognised_with_its_classes_input_and_layer(name: str, layer: str) -> None:
    from gradcam_cli.model.load import load_model
    from gradcam_cli.run.tasks import SegmentTask

    loaded = load_model(f"torchvision:{name}", pretrained=False, preprocessing={"input_hw": (64, 64)})
    assert loaded.found_task == "segment" and loaded.segmenter is not None and loaded.segmenter.classes == 21
    assert loaded.class_names is not None and loaded.class_names[0] == "__background__" and loaded.class_names[15] == "person"
    assert SegmentTask().layers(loaded) == [layer]
    default = load_model(f"torchvision:{name}", pretrained=False)
    assert default.data_config.input_hw == (520, 520) and default.data_config.fit == "stretch"


def test_an_image_with_nothing_to_explain_is_said_once(run_cli, nets) -> None:
    result = run_cli("explain", "green.png", "green.png", "--model", "nets.py:Colours", *SIZE, "-o", "out", "--json", "--class", "1")
    assert result.code == 0 and [r["segments"] for r in result.records()] == [[], []]
    said = [line for line in result.stderr.splitlines() if "gives none of its pixels to the --class asked for" in line]
    assert len(said) == 1


def test_gradcam_layers_marks_a_segmenters_default_layer(run_cli, nets) -> None:
    mine = run_cli("layers", "nets.py:Colours", "--input-size", "32")
    assert mine.code == 0 and "default target: features" in mine.stderr
    theirs = run_cli("layers", "torchvision:deeplabv3_mobilenet_v3_large", "--input-size", "64")
    assert theirs.code == 0 and "default target: backbone.16" in theirs.stderr
    assert any(line.startswith("* ") and "backbone.16 " in line for line in theirs.stdout.splitlines())


EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.parametrize("method", ["hirescam", "gradcam"])
def test_the_shipped_segmenters_maps_lie_on_their_shapes(run_cli, tmp_path, method) -> None:
    """The example segmenter (examples/shapes_segmenter_model) on its six example scenes: each shape's class is found,
    and hirescam's map of it holds most of its energy on the shape (a shape covers 1-17% of the scene); gradcam's
    pooled gradient spreads over the scene (its shares measured: mean 0.15 against hirescam's 0.70)."""
    result = run_cli(
        "explain", EXAMPLES / "shapes_segmentation" / "images", "--model", f"{EXAMPLES}/shapes_segmenter.py:build",
        "--weights", EXAMPLES / "shapes_segmenter_model" / "shapes_segmenter.safetensors", "--labels",
        EXAMPLES / "shapes_segmenter_model" / "labels.txt", "--input-size", "256", "--mean", "0.5", "--std", "0.5", "--truth",
        EXAMPLES / "shapes_segmentation" / "masks", "--method", method, "-o", tmp_path / "out", "--json",
    )  # fmt: skip
    records = _records(result)
    assert len(records) == 6 and all(r["layers"] == ["bottleneck"] for r in records)
    found = [s for r in records for s in r["segments"] if s["region"] == "predicted"]
    for record in records:
        true = {o["class_name"] for o in record["overlap"] if o["true_area"] and o["class_name"] != "background"}
        assert true == {s["class_name"] for s in record["segments"] if s["region"] == "predicted"}, record["input"]
        assert all(o["iou"] > 0.7 for o in record["overlap"] if o["class_name"] in true)
    energy = [s["energy_in_region"] for s in found]
    if method == "hirescam":
        assert all(e > 0.4 and e > 5 * s["area_fraction"] for e, s in zip(energy, found))
    else:
        assert np.mean(energy) < 0.3
