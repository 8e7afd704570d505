"""Ultralytics YOLO detectors by `yolo:`: configs with seeded random weights, checkpoints behind --trust-pickle, offline.

ultralytics is the optional `[yolo]` extra (in the test extra, so CI runs these; a missing one fails there).
Nothing is downloaded: the configs ship with ultralytics, the checkpoint is written here by Ultralytics'
own `YOLO.save`. The family's NMS is checked against Ultralytics' `non_max_suppression`.
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import require, write_image


def _imported_as_the_hub_imports_it() -> object:
    """ultralytics imported by the hub first (quiet, offline, PIL's Image.open and torch.save left as they were: the
    other test files this process runs decode corrupt images), then `require`'s verdict where it is missing."""
    from gradcam_cli.errors import UsageError
    from gradcam_cli.model.ultralytics_hub import import_ultralytics

    try:
        import_ultralytics()
    except UsageError:
        pass
    return require("ultralytics")


ultralytics = _imported_as_the_hub_imports_it()
V8N_LAYERS = ["model.15", "model.18", "model.21"]  # the C2f blocks whose outputs yolov8n's Detect head reads


@pytest.fixture(scope="module")
def v8n():
    """yolov8n.yaml as the CLI loads it (seeded random weights), built once: never change it."""
    from gradcam_cli.model.load import load_model

    return load_model("yolo:yolov8n.yaml", pretrained=False)


@pytest.fixture
def photo(tmp_path: Path) -> Path:
    return write_image(tmp_path / "photo.png", 640, 480, seed=7)


def _one_line(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.code == 2 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def _letterboxed(path: Path, config):
    """The photo as the run feeds it: its geometry and the (1, 3, H, W) input."""
    import torch
    from PIL import Image

    from gradcam_cli.geometry import plan_geometry, to_input_array

    image = np.asarray(Image.open(path).convert("RGB"))
    geometry = plan_geometry(image.shape[:2], config)
    return geometry, torch.from_numpy(to_input_array(image, geometry, config))[None]


def _synthetic(anchors: int = 300, classes: int = 3, seed: int = 0):
    """A Detect head's eval output, (y, parts), with boxes spread over a 320 input and scores in (0, 1); y a leaf."""
    import torch

    g = torch.Generator().manual_seed(seed)
    centres, sizes = torch.rand(1, 2, anchors, generator=g) * 320, 8 + torch.rand(1, 2, anchors, generator=g) * 60
    scores = torch.rand(1, classes, anchors, generator=g)
    y = torch.cat([centres, sizes, scores], 1).requires_grad_(True)
    return y, {"boxes": torch.zeros(1, 64, anchors), "scores": torch.logit(scores), "feats": []}


# ---------------------------------------------------------------- the family's reading, on the head's output


@pytest.mark.parametrize("conf", [0.0, 0.3, 0.8])
def test_nms_keeps_what_ultralytics_keeps(conf: float) -> None:
    import torch
    from ultralytics.utils.nms import non_max_suppression

    from gradcam_cli.model.yolo_detectors import YoloDetectors

    y, parts = _synthetic()
    (found,) = YoloDetectors().read((y, parts), "the model", (0, 0))
    above = found.scores.detach() > conf
    (theirs,) = non_max_suppression(y.detach(), conf_thres=conf, iou_thres=0.7, max_det=300)
    ours = torch.cat([found.boxes.detach()[above], found.scores.detach()[above, None], found.labels[above, None].float()], 1)
    order = lambda rows: rows[torch.argsort(rows[:, 4], descending=True)]  # noqa: E731 - one sort, two uses
    assert len(ours) == len(theirs) > 0
    assert torch.allclose(order(ours), order(theirs), atol=1e-4)


def test_each_score_is_the_heads_own_entry_in_the_graph() -> None:
    """The gradient of the scores' sum is 1 exactly at [4 + class, anchor] of each kept detection, 0 elsewhere."""
    import torch

    from gradcam_cli.model.yolo_detectors import YoloDetectors

    y, parts = _synthetic()
    (found,) = YoloDetectors().read((y, parts), "the model", (0, 0))
    (grad,) = torch.autograd.grad(found.scores.sum(), y)
    assert grad[0, :4].abs().sum() == 0 and grad[0, 4:].sum() == len(found)
    anchors = grad[0, 4:].nonzero()
    assert sorted(anchors[:, 0].tolist()) == sorted(found.labels.tolist())


def test_every_candidate_is_every_anchor_and_restored() -> None:
    from gradcam_cli.model.yolo_detectors import YoloDetectors

    family, output = YoloDetectors(), _synthetic(anchors=300)
    with family.every_candidate(None):  # type: ignore[arg-type]
        (every,) = family.read(output, "the model", (0, 0))
    (kept,) = family.read(output, "the model", (0, 0))
    assert len(every) == 300 and len(kept) < 300
    assert (every.scores.detach() == output[0][0, 4:].detach().max(0).values).all()


@pytest.mark.parametrize(
    ("output", "says"),
    [
        ("end2end", "it returned a tuple of a (1, 300, 6) tensor, a dict of one2many, one2one"),
        ("tensor", "it returned a (1, 7, 300) tensor"),
        ("classes", "it returned a tuple of a (1, 7, 300) tensor, a dict of boxes, scores, feats"),
    ],
)
def test_an_output_of_another_rule_is_one_line(output: str, says: str) -> None:
    import torch

    from gradcam_cli.errors import ModelError
    from gradcam_cli.model.yolo_detectors import YoloDetectors

    y, parts = _synthetic()
    given = {
        "end2end": (torch.zeros(1, 300, 6), {"one2many": parts, "one2one": parts}),
        "tensor": y,
        "classes": (y, {**parts, "scores": torch.zeros(1, 5, 300)}),  # the parts score 5 classes, y 3
    }[output]
    with pytest.raises(ModelError, match="did not return what Ultralytics' Detect head returns") as error:
        YoloDetectors().read(given, "the model", (0, 0))
    assert says in str(error.value)


def test_letterbox_is_ultralytics_grey_and_maps_back_exactly(tmp_path: Path) -> None:
    import torch
    from torch import nn
    from ultralytics.data.augment import LetterBox

    from gradcam_cli.geometry import boxes_to_original, map_to_original
    from gradcam_cli.model.yolo_detectors import YoloDetectors

    stub = nn.Module()
    stub.stride, stub.args = torch.tensor([8.0, 16.0, 32.0]), {"imgsz": 630}  # rounded up to the stride: 640
    config = YoloDetectors().data_config(stub)
    assert config.input_hw == (640, 640) and config.fit == "letterbox" and config.pad == 114 and config.mean == (0, 0, 0)
    for width, height in ((640, 480), (300, 201), (123, 457)):
        path = write_image(tmp_path / f"{width}x{height}.png", width, height)
        geometry, x = _letterboxed(path, config)
        rows, cols = geometry.resized_hw
        top, left = -geometry.crop_offset[0], -geometry.crop_offset[1]
        theirs = LetterBox((640, 640), auto=False)(image=np.zeros((height, width, 3), np.uint8))  # where Ultralytics puts it
        photo_rows, photo_cols = np.nonzero((theirs != 114).any(2))
        assert (photo_rows.min(), photo_cols.min(), photo_rows.max() + 1, photo_cols.max() + 1) == (top, left, top + rows, left + cols)
        grey = torch.ones_like(x, dtype=torch.bool)
        grey[..., top : top + rows, left : left + cols] = False
        assert torch.all(x[grey] == 114 / 255)
        corners = torch.tensor([[left, top, left + cols, top + rows]], dtype=torch.float32)
        assert torch.allclose(boxes_to_original(corners, geometry), torch.tensor([[0.0, 0, width, height]]), atol=1e-4)
        inside = (~grey[0, 0]).float()
        assert np.all(map_to_original(inside, geometry) == 1.0)  # the map's photo part is the whole photo, exactly


# ---------------------------------------------------------------- one-line refusals, before any network or unpickling


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every attempt to connect or resolve a name, refused and kept."""
    tried: list[object] = []

    def refused(*args: object, **kwargs: object) -> None:
        tried.append(args)
        raise OSError("no network in this test")

    monkeypatch.setattr(socket.socket, "connect", refused)
    monkeypatch.setattr(socket, "getaddrinfo", refused)
    return tried


@pytest.mark.parametrize(
    ("model", "says"),
    [
        ("yolo:yolov8n.pt", "--model yolo:yolov8n.pt: no such file, and weights are never downloaded here"),
        ("yolo:https://example.com/best.pt", "nothing is downloaded here"),
        ("yolo:best.onnx", "is neither a checkpoint (.pt) nor a config (.yaml)"),
        ("yolo:nosuch.yaml", "no such config here nor among ultralytics' own"),
        ("yolo:yolov8n-cls.yaml", "is not a detector: its head is Classify"),
    ],
)
def test_what_cannot_load_is_one_line(run_cli, photo: Path, no_network: list[object], model: str, says: str) -> None:
    line = _one_line(run_cli("explain", photo, "--model", model, "--no-pretrained", "-o", "out"))
    assert says in line and not no_network


def test_a_checkpoint_is_unpickled_only_with_trust_pickle(run_cli, photo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    opened: list[object] = []
    monkeypatch.setattr(torch, "load", lambda *a, **k: opened.append(a))
    Path("best.pt").write_bytes(b"\x80\x02 a pickle would run code here")
    line = _one_line(run_cli("explain", photo, "--model", "yolo:best.pt", "-o", "out"))
    assert "is a pickle: loading it runs the code inside it" in line and "--trust-pickle" in line and not opened


def test_a_config_says_its_weights_are_random(run_cli, photo: Path) -> None:
    line = _one_line(run_cli("explain", photo, "--model", "yolo:yolov8n.yaml", "-o", "out"))
    assert "is a config: its weights would be random; say so with --no-pretrained" in line


def test_its_import_leaves_pil_and_torch_as_they_were(tmp_path: Path) -> None:
    """ultralytics' own Image.open would try to pip-install a HEIF plugin on a corrupt image, and print on stdout."""
    import PIL.Image
    import torch
    from ultralytics.utils import patches

    assert PIL.Image.open is patches._image_open and torch.save is patches._torch_save
    (tmp_path / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    with pytest.raises(PIL.UnidentifiedImageError):
        PIL.Image.open(tmp_path / "broken.png")


def test_without_ultralytics_one_line_names_the_extra(run_cli, photo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ultralytics", None)  # `import ultralytics` fails as if it were not installed
    line = _one_line(run_cli("explain", photo, "--model", "yolo:yolov8n.yaml", "--no-pretrained", "-o", "out"))
    assert "yolo: models need the ultralytics package, which is not installed" in line and "pip install 'gradcam-cli[yolo]'" in line


# ---------------------------------------------------------------- yolov8n


def test_the_family_knows_v8n(v8n) -> None:
    family, model = v8n.detector, v8n.model
    assert family.name == "ultralytics" and v8n.source.name == "ultralytics" and not model.training
    assert family.default_layers(model) == V8N_LAYERS == [f"model.{i}" for i in model.model[-1].f]
    key = family.head_key(model)
    assert key == "model.22.cv3.0.2.weight" and dict(model.named_parameters())[key].shape[0] == 80 == family.num_classes(model)
    assert v8n.data_config.input_hw == (640, 640) and v8n.data_config.pad == 114
    assert v8n.class_names is None  # a config's names are placeholders ("0", "1", ...)


def test_a_detections_score_is_the_models_own(v8n, photo: Path) -> None:
    """Each kept detection's score is y[0, 4 + class, anchor] of a plain forward, the anchor found by its box."""
    import torch

    _, x = _letterboxed(photo, v8n.data_config)
    x.requires_grad_(True)
    y, parts = v8n.model(x)
    (found,) = v8n.detector.read((y, parts), "yolov8n", (0, 0))
    assert len(found) > 5
    boxes = torch.cat([y[0, :2] - y[0, 2:4] / 2, y[0, :2] + y[0, 2:4] / 2]).T.detach()
    for box, score, label in zip(found.boxes.detach()[:10], found.scores[:10], found.labels[:10]):
        anchor = int((boxes == box).all(1).nonzero()[0])
        assert score == y[0, 4 + label, anchor]
    (grad,) = torch.autograd.grad(found.scores[0], x)
    assert grad.abs().sum() > 0  # in the forward's graph, back to the input


def test_each_detection_has_its_own_map(v8n, photo: Path) -> None:
    from gradcam_cli.run.prepare import prepare_run
    from gradcam_cli.settings import build_settings

    settings = build_settings({"model": "yolo:yolov8n.yaml", "pretrained": False, "score_threshold": 0.0, "max_detections": 2})
    run = prepare_run(settings, loaded=v8n, notices=False)
    assert [layer.name for layer in run.layers] == V8N_LAYERS
    cams = run.compute(_letterboxed(photo, v8n.data_config)[1])
    assert cams.maps.shape[:2] == (1, 2) and not cams.blank[0].any()
    assert (cams.maps[0, 0] - cams.maps[0, 1]).abs().max() > 0.1


@pytest.mark.slow  # builds yolov8n and runs it at 640x640 with one batched backward
def test_the_cli_explains_five_detections_on_the_photo(run_cli, v8n, photo: Path) -> None:
    result = run_cli("explain", photo, "--model", "yolo:yolov8n.yaml", "--no-pretrained", "--score-threshold", "0.0",
                     "--max-detections", "5", "--json", "-o", "out")  # fmt: skip
    assert result.code == 0, result.stderr
    (record,) = result.records()
    assert record["source"] == "ultralytics" and record["layers"] == V8N_LAYERS and record["method"] == "hirescam"
    assert record["settings"]["pretrained"] is False and len(record["detections"]) == 5
    for detection in record["detections"]:
        x1, y1, x2, y2 = detection["box"]
        assert 0 <= x1 <= x2 <= 640 and 0 <= y1 <= y2 <= 480 and not detection["blank"]
    _same_as_a_plain_forward(v8n, photo, record["detections"])


def _same_as_a_plain_forward(loaded, photo: Path, detections: list[dict]) -> None:
    """Each record's score (to 1e-5) is its class's score at an anchor whose box, on the photo, is the record's box."""
    import torch

    from gradcam_cli.geometry import boxes_to_original

    geometry, x = _letterboxed(photo, loaded.data_config)
    with torch.no_grad():
        y = loaded.model(x)[0][0]
    boxes = boxes_to_original(torch.cat([y[:2] - y[2:4] / 2, y[:2] + y[2:4] / 2]).T, geometry)
    for detection in detections:
        at = (boxes - torch.tensor(detection["box"])).abs().max(1).values < 0.01
        scores = y[4 + detection["class_index"], at]
        assert len(scores) and (scores - detection["score"]).abs().min() < 1e-5, detection


@pytest.mark.slow  # writes a state dict and runs the CLI at 640x640
def test_weights_into_a_config_score_as_the_model_does(run_cli, v8n, photo: Path, tmp_path: Path) -> None:
    """He's initialisation carries the photo to the head and the class biases are 0: scores near 0.5 that differ from
    anchor to anchor (an untrained yolov8n scores about 1e-4 everywhere, its class bias), so a score names its anchor."""
    import copy

    import torch
    from safetensors.torch import save_file
    from torch import nn

    from gradcam_cli.model.load import LoadedModel

    model, g = copy.deepcopy(v8n.model), torch.Generator().manual_seed(3)
    with torch.no_grad():
        for conv in (m for m in model.modules() if isinstance(m, nn.Conv2d) and m.weight.requires_grad):  # not DFL's fixed one
            conv.weight.copy_(torch.randn(conv.weight.shape, generator=g) * (2 / conv.weight[0].numel()) ** 0.5)
        for level in model.model[-1].cv3:
            level[-1].bias.zero_()
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, tmp_path / "spread.safetensors")
    result = run_cli("explain", photo, "--model", "yolo:yolov8n.yaml", "--weights", tmp_path / "spread.safetensors",
                     "--score-threshold", "0.5", "--max-detections", "6", "--json", "-o", "out")  # fmt: skip
    assert result.code == 0, result.stderr
    detections = result.records()[0]["detections"]
    assert len(detections) == 6 and len({d["score"] for d in detections}) == 6 and all(d["score"] >= 0.5 for d in detections)
    _same_as_a_plain_forward(LoadedModel(**{**vars(v8n), "model": model}), photo, detections)


@pytest.mark.slow  # Ultralytics' own save, then the CLI unpickles it
def test_a_saved_checkpoint_loads_with_trust_pickle(run_cli, photo: Path, tmp_path: Path) -> None:
    from ultralytics import YOLO

    YOLO("yolov8n.yaml").save(tmp_path / "random.pt")
    result = run_cli("explain", photo, "--model", f"yolo:{tmp_path / 'random.pt'}", "--trust-pickle", "--score-threshold", "0",
                     "--max-detections", "2", "--json", "-o", "out")  # fmt: skip
    assert result.code == 0, result.stderr
    (record,) = result.records()
    assert len(record["detections"]) == 2 and record["layers"] == V8N_LAYERS and record["settings"]["pretrained"] is None
    listed = run_cli("layers", f"yolo:{tmp_path / 'random.pt'}", "--trust-pickle", "--json")
    assert listed.code == 0, listed.stderr
    defaults = [row["name"] for row in map(json.loads, listed.stdout.splitlines()) if row["default"]]
    assert defaults == V8N_LAYERS


@pytest.mark.slow  # builds yolov8n again and probes every module
def test_layers_marks_the_maps_the_head_reads(run_cli) -> None:
    result = run_cli("layers", "yolo:yolov8n.yaml", "--depth", "2")
    assert result.code == 0, result.stderr
    marked = [line.split()[1] for line in result.stdout.splitlines() if line.startswith("*")]
    assert marked == V8N_LAYERS and "input 640x640" in result.stderr


@pytest.mark.slow  # builds YOLO26n and YOLO11n
@pytest.mark.parametrize(
    ("config", "layers"), [("yolo26n.yaml", ["model.16", "model.19", "model.22"]), ("yolo11n.yaml", ["model.16", "model.19", "model.22"])]
)
def test_other_generations_read_by_the_same_rule(config: str, layers: list[str], photo: Path) -> None:
    """YOLO26's head has a one-to-one branch too: it is read, as 8.4's predict reads it, on its one-to-many branch."""
    import torch

    from gradcam_cli.model.load import load_model

    loaded = load_model(f"yolo:{config}", pretrained=False)
    head = loaded.model.model[-1]
    assert loaded.detector.default_layers(loaded.model) == layers and not getattr(head, "end2end", False)
    with torch.no_grad():
        (found,) = loaded.detector.read(loaded.model(_letterboxed(photo, loaded.data_config)[1]), config, (0, 0))
    assert 0 < len(found) <= 300
