"""Hugging Face transformers classifiers by `hf:/dir`: tiny random ViT, Swin and ConvNeXt built from configs.

Each is made with `from_config`, then written with `save_pretrained` beside
its image processor, and loaded back by the CLI's own path (`hf:/that/dir`):
the real loading, no network. transformers is the optional `[hf]` extra
(in the test extra, so CI runs these).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import require, write_image

transformers = require("transformers")
LABELS = {0: "circle", 1: "square", 2: "star"}


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The three models, each in its own folder as save_pretrained leaves it, and a config-only folder."""
    import torch

    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("hf")
    common = {"num_labels": 3, "id2label": LABELS, "label2id": {v: k for k, v in LABELS.items()}}
    vit = transformers.ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                 intermediate_size=64, **common)  # fmt: skip
    swin = transformers.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[1, 2], window_size=2, **common)
    convnext = transformers.ConvNextConfig(hidden_sizes=[8, 16], depths=[1, 1], num_stages=2, **common)
    processors = {
        "vit": transformers.ViTImageProcessor(size={"height": 32, "width": 32}),
        "swin": transformers.ViTImageProcessor(size={"height": 32, "width": 32}, image_mean=[0.4, 0.4, 0.4], image_std=[0.2, 0.2, 0.2]),
        "convnext": transformers.ConvNextImageProcessor(size={"shortest_edge": 64}, crop_pct=0.875),
    }
    folders = {}
    for name, config in (("vit", vit), ("swin", swin), ("convnext", convnext)):
        folder = root / name
        transformers.AutoModelForImageClassification.from_config(config).save_pretrained(folder)
        processors[name].save_pretrained(folder)
        folders[name] = folder
    folders["config_only"] = root / "config_only"
    folders["config_only"].mkdir()
    (folders["config_only"] / "config.json").write_text((root / "vit" / "config.json").read_text())
    return folders


@pytest.fixture
def photo(tmp_path: Path) -> Path:
    return write_image(tmp_path / "photo.png", 90, 70)


@pytest.mark.parametrize(
    ("name", "layer"),
    [("vit", "vit.layers.1.layernorm_before"), ("swin", "swin.encoder.layers.1"), ("convnext", "convnext.encoder.stages.1")],
)
def test_each_family_explains_with_its_default_layer(run_cli, saved, photo: Path, tmp_path: Path, name: str, layer: str) -> None:
    result = run_cli("explain", photo, "--model", f"hf:{saved[name]}", "--json", "-o", tmp_path / "out")
    assert result.code == 0, result.stderr
    (record,) = result.records()
    assert record["source"] == "transformers" and record["output"] == "logits", record
    assert record["layers"] == [layer] and not record["blank"]
    assert record["class_name"] in LABELS.values()  # id2label
    assert "Loading weights" not in result.stderr  # transformers' progress bars are not ours to show


def test_the_image_processor_is_the_preprocessing(saved) -> None:
    from gradcam_cli import load_model

    vit = load_model(f"hf:{saved['vit']}", device="cpu")
    assert vit.data_config.input_hw == (32, 32) and vit.data_config.mean == (0.5, 0.5, 0.5) and vit.num_prefix_tokens == 1
    assert load_model(f"hf:{saved['swin']}", device="cpu").data_config.std == (0.2, 0.2, 0.2)
    convnext = load_model(f"hf:{saved['convnext']}", device="cpu").data_config
    assert convnext.input_hw == (64, 64) and convnext.crop_pct == 0.875 and convnext.interpolation == "bicubic"
    assert vit.class_names == ["circle", "square", "star"]


def test_layers_and_stages_of_a_transformers_model(run_cli, saved, photo: Path, tmp_path: Path) -> None:
    listed = run_cli("layers", f"hf:{saved['swin']}", "--json")
    assert listed.code == 0, listed.stderr
    defaults = [row["name"] for row in map(json.loads, listed.stdout.splitlines()) if row["default"]]
    assert defaults == ["swin.encoder.layers.1"]
    grid = run_cli("compare", photo, "--model", f"hf:{saved['convnext']}", "--methods", "gradcam", "--json", "-o", tmp_path / "grid")
    assert grid.code == 0, grid.stderr
    assert grid.records()[0]["rows"] == ["convnext.encoder.stages.0", "convnext.encoder.stages.1"]


def test_a_config_without_weights_gives_random_weights_only_when_asked(run_cli, saved, photo: Path, tmp_path: Path) -> None:
    refused = run_cli("explain", photo, "--model", f"hf:{saved['config_only']}", "-o", tmp_path / "out")
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert refused.code == 2 and len(lines) == 1 and "no file named model.safetensors" in lines[0], refused.stderr
    random = run_cli("explain", photo, "--model", f"hf:{saved['config_only']}", "--no-pretrained", "--json", "-o", tmp_path / "out")
    assert random.code == 0, random.stderr
    assert "no image processor config: assuming ImageNet's statistics" in random.stderr


@pytest.mark.parametrize("missing", ["folder", "package"])
def test_bad_hf_inputs_are_one_line(run_cli, saved, photo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, missing: str) -> None:
    model = f"hf:{tmp_path / 'nowhere'}" if missing == "folder" else f"hf:{saved['vit']}"
    if missing == "package":
        monkeypatch.setitem(sys.modules, "transformers", None)
    result = run_cli("explain", photo, "--model", model, "-o", tmp_path / "out")
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.code == 2 and len(lines) == 1, result.stderr
    says = (
        "no such folder" if missing == "folder" else "need the transformers package, which is not installed; pip install 'gradcam-cli[hf]'"
    )
    assert says in lines[0] and (missing == "folder" or "pip install 'gradcam-cli[hf]'" in lines[0])
