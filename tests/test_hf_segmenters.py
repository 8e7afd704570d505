"""transformers' semantic segmenters by `hf:/dir`: tiny random SegFormer, and UperNet on a ConvNeXt and a Swin backbone.

Each is built from its config, written with `save_pretrained` (beside a
SegFormer image processor, as UperNet's checkpoints have it; the Swin one
without) and loaded back by the CLI's own path (`hf:/that/dir`): no network.
Each pixel's class is checked against the processor's own
`post_process_semantic_segmentation`.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from conftest import require, write_image

transformers = require("transformers")
torch = require("torch")
LABELS = {0: "sky", 1: "road", 2: "car"}
SIDE = 64  # the processor's height and width
FAMILIES = ("segformer", "upernet_convnext", "upernet_swin")
DEFAULT_LAYERS = {
    "segformer": "segformer.stages.3",  # the last encoder stage, a map (transformers 5)
    "upernet_convnext": "backbone.hidden_states_norms.stage4",  # the backbone's last level, as the head takes it
    "upernet_swin": "backbone.hidden_states_norms.stage4",  # the same, tokens on a grid
}


def _config(name: str) -> Any:
    common: dict[str, Any] = {"num_labels": 3, "id2label": LABELS, "label2id": {v: k for k, v in LABELS.items()}}
    stages = {"out_features": ["stage1", "stage2", "stage3", "stage4"]}
    if name == "segformer":
        return transformers.SegformerConfig(depths=[1, 1, 1, 1], sr_ratios=[8, 4, 2, 1], hidden_sizes=[8, 16, 24, 32],
                                            num_attention_heads=[1, 1, 1, 1], decoder_hidden_size=16, **common)  # fmt: skip
    if name == "upernet_convnext":
        backbone = transformers.ConvNextConfig(hidden_sizes=[8, 16, 24, 32], depths=[1, 1, 1, 1], num_stages=4, **stages)
    else:
        backbone = transformers.SwinConfig(embed_dim=8, depths=[1, 1, 1, 1], num_heads=[1, 1, 1, 1], window_size=2, **stages)
    return transformers.UperNetConfig(backbone_config=backbone, hidden_size=16, use_auxiliary_head=False, **common)


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each family in its own folder as save_pretrained leaves it; a SegFormer processor beside all but the Swin one."""
    root = tmp_path_factory.mktemp("hf_segmenters")
    for name in FAMILIES:
        torch.manual_seed(0)
        transformers.AutoModelForSemanticSegmentation.from_config(_config(name)).save_pretrained(root / name)
        if name != "upernet_swin":
            transformers.SegformerImageProcessor(size={"height": SIDE, "width": SIDE}).save_pretrained(root / name)
    return {name: root / name for name in FAMILIES}


@pytest.fixture
def photo(tmp_path: Path) -> Path:
    return write_image(tmp_path / "photo.png", 90, 70)


@pytest.mark.parametrize("name", FAMILIES)
def test_each_family_segments_with_its_class_names_and_default_layer(run_cli, saved, photo: Path, tmp_path: Path, name: str) -> None:
    result = run_cli("explain", photo, "--model", f"hf:{saved[name]}", "--json", "-o", tmp_path / "out")
    assert result.code == 0, result.stderr
    (record,) = result.records()
    assert record["source"] == "transformers" and record["target"] == "segment" and record["output"] == "logits"
    assert record["layers"] == [DEFAULT_LAYERS[name]] and record["method"] == "hirescam"
    assert record["segments"] and all(s["class_name"] == LABELS[s["class_index"]] for s in record["segments"])
    (picture,) = record["outputs"]
    assert Path(picture).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Traceback" not in result.stderr and "Loading weights" not in result.stderr


def test_random_weights_from_the_config_alone(run_cli, saved, photo: Path, tmp_path: Path) -> None:
    """A folder with only config.json is refused without --no-pretrained (no weights), explained with random ones."""
    folder = tmp_path / "config_only"
    folder.mkdir()
    (folder / "config.json").write_text((saved["segformer"] / "config.json").read_text())
    result = run_cli("explain", photo, "--model", f"hf:{folder}", "--no-pretrained", "--json", "-o", tmp_path / "out")
    assert result.code == 0, result.stderr
    (record,) = result.records()
    assert record["target"] == "segment" and record["layers"] == [DEFAULT_LAYERS["segformer"]]
    assert {s["class_name"] for s in record["segments"]} <= set(LABELS.values())


@pytest.mark.parametrize("name", ["segformer", "upernet_convnext"])
def test_each_pixels_class_is_post_process_semantic_segmentations(saved, name: str) -> None:
    """The scores (SegFormer's at a quarter of the input) resized to the input as the processor's post-processing
    resizes them to a target size: the same class at every pixel of a random 64x96 input. The processor's own pixel
    values are ours for a photo at its size."""
    from gradcam_cli import load_model
    from gradcam_cli.geometry import plan_geometry, to_input_array

    loaded = load_model(f"hf:{saved[name]}", device="cpu")
    processor = transformers.AutoImageProcessor.from_pretrained(saved[name])
    pixels = np.random.default_rng(0).integers(0, 256, (SIDE, SIDE, 3), dtype=np.uint8)
    theirs = processor(images=pixels, return_tensors="pt")["pixel_values"]
    ours = torch.from_numpy(to_input_array(pixels, plan_geometry(pixels.shape[:2], loaded.data_config), loaded.data_config))[None]
    assert torch.allclose(ours, theirs, atol=1e-5)
    torch.manual_seed(0)
    x, segmenter = torch.randn(2, 3, 64, 96), loaded.segmenter
    with torch.no_grad():
        logits = loaded.model(x)
    scores = segmenter.scores(logits, name, (64, 96))
    expected = processor.post_process_semantic_segmentation(SimpleNamespace(logits=logits), target_sizes=[(64, 96)] * 2)
    labels = segmenter.labels(segmenter.probabilities(scores))
    assert all(torch.equal(labels[i], expected[i]) for i in range(2)) and len(labels.unique()) > 1
    assert (name == "segformer") == (tuple(logits.shape[-2:]) == (16, 24))  # SegFormer's at a quarter, UperNet's full size


def test_the_processor_the_config_and_the_classifier_stay_apart(saved) -> None:
    """The processor's size and statistics, id2label's names; a SegFormer config saved from its classifier still builds
    the classifier."""
    from gradcam_cli import load_model

    loaded = load_model(f"hf:{saved['segformer']}", device="cpu")
    assert loaded.found_task == "segment" and loaded.segmenter.classes == 3 and loaded.class_names == list(LABELS.values())
    assert loaded.data_config.input_hw == (SIDE, SIDE) and loaded.data_config.mean == (0.485, 0.456, 0.406)
    from gradcam_cli.model.hf_hub import _segments

    assert _segments(transformers.AutoConfig.from_pretrained(saved["segformer"]))  # saved from SegformerForSemanticSegmentation
    classifier = _config("segformer")
    classifier.architectures = ["SegformerForImageClassification"]
    assert not _segments(classifier) and not _segments(_config("segformer"))  # a bare SegFormer config: the classifier, as before
    assert _segments(_config("upernet_convnext"))  # UperNet builds only a segmenter


@pytest.mark.parametrize("name", ["segformer", "upernet_swin"])
def test_layers_marks_the_default(run_cli, saved, name: str) -> None:
    listed = run_cli("layers", f"hf:{saved[name]}", "--json")
    assert listed.code == 0, listed.stderr
    rows = list(map(json.loads, listed.stdout.splitlines()))
    assert [row["name"] for row in rows if row["default"]] == [DEFAULT_LAYERS[name]]
