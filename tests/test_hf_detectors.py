"""transformers' object detectors by `hf:/dir`: tiny random DETR, Conditional DETR, Deformable DETR and RT-DETR.

Each is built from its config (a tiny ResNet backbone, random weights), written
with `save_pretrained` beside its image processor and loaded back by the CLI's
own path (`hf:/that/dir`): no network. What `read` makes of the output is
checked against the processor's own `post_process_object_detection`, the
input against the processor's own pixel values.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import require, write_image

transformers = require("transformers")
torch = require("torch")
LABELS = {0: "circle", 1: "square", 2: "star"}
SIDE = 96  # every processor's input: DETR's shortest edge, RT-DETR's height and width
ARCHITECTURES = ("detr", "conditional_detr", "deformable_detr", "rt_detr")
STAGES = [f"model.backbone.model.encoder.stages.{i}" for i in (1, 2, 3)]
DEFAULT_LAYERS = {"detr": STAGES[-1:], "conditional_detr": STAGES[-1:], "deformable_detr": STAGES, "rt_detr": STAGES}


def _resnet(config_class: Any, stages: list[str]) -> Any:
    return config_class(embedding_size=8, hidden_sizes=[8, 16, 16, 32], depths=[1, 1, 1, 1], layer_type="basic", out_features=stages)


def _built(name: str) -> tuple[Any, Any]:
    """The architecture's tiny config and its image processor (96 pixels)."""
    common: dict[str, Any] = {"num_labels": 3, "id2label": LABELS, "label2id": {v: k for k, v in LABELS.items()}, "num_queries": 6}
    layers = {"encoder_layers": 1, "encoder_attention_heads": 2, "decoder_attention_heads": 2, "encoder_ffn_dim": 16, "decoder_ffn_dim": 16}
    detr = {"use_timm_backbone": False, "use_pretrained_backbone": False, "init_std": 0.5, **layers, **common}  # queries apart
    edge = {"shortest_edge": SIDE, "longest_edge": 160}
    three = ["stage2", "stage3", "stage4"]
    if name == "detr":
        backbone = _resnet(transformers.ResNetConfig, ["stage4"])
        config = transformers.DetrConfig(backbone_config=backbone, d_model=16, decoder_layers=1, **detr)
        return config, transformers.DetrImageProcessor(size=edge)
    if name == "conditional_detr":
        backbone = _resnet(transformers.ResNetConfig, ["stage4"])
        config = transformers.ConditionalDetrConfig(backbone_config=backbone, d_model=16, decoder_layers=1, **detr)
        return config, transformers.ConditionalDetrImageProcessor(size=edge)
    if name == "deformable_detr":  # GroupNorm(32) needs 32 channels; one decoder layer trips its weight tying
        backbone = _resnet(transformers.ResNetConfig, three)
        config = transformers.DeformableDetrConfig(
            backbone_config=backbone, d_model=32, decoder_layers=2, encoder_n_points=2, decoder_n_points=2, **detr
        )
        return config, transformers.DeformableDetrImageProcessor(size=edge)
    config = transformers.RTDetrConfig(
        backbone_config=_resnet(transformers.RTDetrResNetConfig, three), encoder_in_channels=[16, 16, 32], encoder_hidden_dim=16,
        encoder_ffn_dim=16, encoder_attention_heads=2, d_model=16, decoder_in_channels=[16, 16, 16], decoder_ffn_dim=16,
        decoder_attention_heads=2, decoder_layers=1, num_denoising=0, decoder_n_points=2, **common,
    )  # fmt: skip
    return config, transformers.RTDetrImageProcessor(size={"height": SIDE, "width": SIDE})


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each architecture in its own folder as save_pretrained leaves it, its processor beside it."""
    root = tmp_path_factory.mktemp("hf_detectors")
    folders = {}
    for name in ARCHITECTURES:
        torch.manual_seed(0)
        config, processor = _built(name)
        transformers.AutoModelForObjectDetection.from_config(config).save_pretrained(root / name)
        processor.save_pretrained(root / name)
        folders[name] = root / name
    return folders


@pytest.fixture
def photo(tmp_path: Path) -> Path:
    return write_image(tmp_path / "photo.png", 90, 70)


def _pixels(seed: int = 0) -> np.ndarray:
    """A square photo at the processors' size: letterboxing it is the identity, so both preprocessings must agree."""
    return np.random.default_rng(seed).integers(0, 256, (SIDE, SIDE, 3), dtype=np.uint8)


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_the_cli_explains_three_detections(run_cli, saved, photo: Path, tmp_path: Path, name: str) -> None:
    kept = ("--score-threshold", "0.0", "--max-detections", "3")
    result = run_cli("explain", photo, "--model", f"hf:{saved[name]}", *kept, "--json", "-o", tmp_path / "out")
    assert result.code == 0, result.stderr
    (record,) = result.records()
    assert record["source"] == "transformers" and record["target"] == "detection" and record["layers"] == DEFAULT_LAYERS[name]
    assert len(record["detections"]) == 3 and record["settings"]["combine"] == "sum"
    assert all(d["class_name"] == LABELS[d["class_index"]] and 0 <= d["score"] <= 1 for d in record["detections"])
    assert all(0 <= d["box"][0] <= d["box"][2] <= 90 and 0 <= d["box"][1] <= d["box"][3] <= 70 for d in record["detections"])
    (picture,) = record["outputs"]
    assert Path(picture).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Loading weights" not in result.stderr


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_scores_and_boxes_are_post_process_object_detections(saved, name: str) -> None:
    """Our input is the processor's pixel values; `read` gives what `post_process_object_detection` gives (threshold
    below every score, the input's size as target size), its scores still in the graph."""
    from gradcam_cli import load_model
    from gradcam_cli.geometry import plan_geometry, to_input_array

    loaded = load_model(f"hf:{saved[name]}", device="cpu")
    processor = transformers.AutoImageProcessor.from_pretrained(saved[name])
    photo = _pixels()
    theirs = processor(images=photo, return_tensors="pt")["pixel_values"]
    ours = torch.from_numpy(to_input_array(photo, plan_geometry(photo.shape[:2], loaded.data_config), loaded.data_config))[None]
    assert torch.allclose(ours, theirs, atol=1e-5)
    x = ours.clone().requires_grad_(True)
    output = loaded.model(x)
    (found,) = loaded.detector.read(output, name, (SIDE, SIDE))
    (expected,) = processor.post_process_object_detection(output, threshold=-1.0, target_sizes=[(SIDE, SIDE)])
    assert torch.equal(found.labels, expected["labels"])
    assert torch.allclose(found.scores, expected["scores"], atol=1e-5) and torch.allclose(found.boxes, expected["boxes"], atol=1e-5)
    (gradient,) = torch.autograd.grad(found.scores[1], x)
    assert gradient.abs().sum() > 0


def test_the_image_processor_is_the_input_and_the_config_the_classes(saved) -> None:
    from gradcam_cli import load_model

    detr = load_model(f"hf:{saved['detr']}", device="cpu")
    config = detr.data_config
    assert config.input_hw == (SIDE, SIDE) and config.fit == "letterbox" and config.mean == (0.485, 0.456, 0.406)
    assert detr.class_names == ["circle", "square", "star"] and detr.found_task == "detect"
    assert detr.detector.head_key(detr.model) == "class_labels_classifier.weight" and detr.detector.extra_rows(detr.model) == 1
    assert detr.model.class_labels_classifier.out_features == 4  # the "no object" row
    rt_detr = load_model(f"hf:{saved['rt_detr']}", device="cpu")
    assert rt_detr.data_config.fit == "stretch" and rt_detr.data_config.mean == (0.0, 0.0, 0.0) and rt_detr.data_config.std == (1.0,) * 3
    assert rt_detr.detector.head_key(rt_detr.model) == "model.decoder.class_embed.0.weight"
    assert rt_detr.detector.extra_rows(rt_detr.model) == 0
    deformable = load_model(f"hf:{saved['deformable_detr']}", device="cpu")
    assert deformable.detector.head_key(deformable.model) == "class_embed.0.weight"  # its heads are tied: the first holds them


@pytest.mark.parametrize("name", ["detr", "deformable_detr"])
def test_two_detections_have_their_own_maps(saved, name: str) -> None:
    from gradcam_cli import load_model
    from gradcam_cli.cams.detections import DetectionTargets
    from gradcam_cli.cams.engine import compute_cams
    from gradcam_cli.cams.methods import get_method
    from gradcam_cli.layers.paths import resolve_layers
    from gradcam_cli.maps import CamOptions

    loaded = load_model(f"hf:{saved[name]}", device="cpu")
    layers = resolve_layers(loaded.model, loaded.detector.default_layers(loaded.model), name)
    targets = DetectionTargets(loaded.detector, score_threshold=0.0, max_detections=2, input_hw=(SIDE, SIDE))
    torch.manual_seed(1)
    x = torch.randn(1, 3, SIDE, SIDE)
    cams = compute_cams(loaded.model, x, layers, get_method("hirescam"), targets, options=CamOptions(combine="sum"))
    assert cams.maps.shape == (1, 2, SIDE, SIDE) and not cams.blank.any()
    assert (cams.maps[0, 0] - cams.maps[0, 1]).abs().max() > 0.05
    assert not torch.equal(cams.found[0].boxes[0], cams.found[0].boxes[1])


@pytest.mark.parametrize("name", ["detr", "rt_detr"])
def test_every_candidate_is_every_query_with_each_class(saved, name: str) -> None:
    """Inside the context: queries x classes candidates (each query's box once per class); outside: the processor's."""
    from gradcam_cli import load_model

    loaded = load_model(f"hf:{saved[name]}", device="cpu")
    family, model = loaded.detector, loaded.model
    with torch.no_grad():
        output = model(torch.randn(1, 3, SIDE, SIDE))
    with family.every_candidate(model):
        (every,) = family.read(output, name, (SIDE, SIDE))
    (kept,) = family.read(output, name, (SIDE, SIDE))
    assert len(every) == 6 * 3 and len(kept) == 6
    assert every.labels.tolist() == [0, 1, 2] * 6 and torch.equal(every.boxes[0], every.boxes[2])
    assert set(kept.scores.tolist()) <= set(every.scores.tolist())


def test_layers_lists_the_feature_maps_the_transformer_reads(run_cli, saved) -> None:
    for name in ("detr", "deformable_detr"):
        listed = run_cli("layers", f"hf:{saved[name]}", "--json")
        assert listed.code == 0, listed.stderr
        assert [row["name"] for row in map(json.loads, listed.stdout.splitlines()) if row["default"]] == DEFAULT_LAYERS[name]


def test_labels_and_weights_are_checked_against_the_head(run_cli, saved, photo: Path, tmp_path: Path) -> None:
    """--labels counts the config's labels (not DETR's "no object"); a checkpoint of another class count rebuilds the head."""
    (tmp_path / "two.txt").write_text("a\nb\n")
    wrong = run_cli("explain", photo, "--model", f"hf:{saved['detr']}", "--labels", tmp_path / "two.txt", "-o", tmp_path / "out")
    lines = [line for line in wrong.stderr.splitlines() if line.strip()]
    assert wrong.code == 2 and len(lines) == 1 and "names 2 classes but the model has 3" in lines[0], wrong.stderr
    config, _ = _built("detr")
    five = {i: f"shape{i}" for i in range(5)}
    bigger = type(config).from_dict({**config.to_dict(), "id2label": five, "label2id": {v: k for k, v in five.items()}})
    torch.save(transformers.AutoModelForObjectDetection.from_config(bigger).state_dict(), tmp_path / "five.pt")
    (tmp_path / "five.txt").write_text("\n".join(five.values()) + "\n")
    model = ("--model", f"hf:{saved['detr']}", "--weights", tmp_path / "five.pt", "--labels", tmp_path / "five.txt")
    result = run_cli("explain", photo, *model, "--score-threshold", "0", "--max-detections", "2", "--json", "-o", tmp_path / "out")
    assert result.code == 0, result.stderr
    assert {d["class_name"] for d in result.records()[0]["detections"]} <= set(five.values())


def test_the_task_is_found_and_an_unread_detector_is_one_line(run_cli, saved, photo: Path, tmp_path: Path) -> None:
    asked = run_cli("explain", photo, "--model", f"hf:{saved['detr']}", "--task", "classify", "-o", tmp_path / "out")
    assert asked.code == 2 and "is a detector (it returns boxes)" in asked.stderr, asked.stderr
    yolos = transformers.YolosConfig(image_size=[32, 32], patch_size=8, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=16, num_detection_tokens=2, num_labels=3)  # fmt: skip
    transformers.AutoModelForObjectDetection.from_config(yolos).save_pretrained(tmp_path / "yolos")
    refused = run_cli("explain", photo, "--model", f"hf:{tmp_path / 'yolos'}", "-o", tmp_path / "out")
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert refused.code == 2 and len(lines) == 1 and "YolosForObjectDetection is a detector whose output is not read yet" in lines[0]
