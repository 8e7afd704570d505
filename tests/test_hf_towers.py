"""transformers' CLIP-style models (model/hf_towers.py) and headless base models by `hf:/dir`, from tiny random folders.

The folders are written by tests/clip_models.py with save_pretrained (config, weights, image processor, tokenizer) and
built by the CLI's own path, no network. The family must score an image against a text exactly as the model's own
forward does (`logits_per_image`), through the same similarity view the runs use; the hub must build a CLIP, SigLIP or
SigLIP 2 folder as the pair of towers and a `Dinov2Model` folder as the embedding model it was saved as.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from clip_models import IMAGE, tiny_hf_clip, tiny_hf_dinov2, tiny_hf_siglip, tiny_hf_siglip2
from conftest import require, write_image

transformers = require("transformers")
import torch  # noqa: E402

from gradcam_cli.errors import ModelError  # noqa: E402
from gradcam_cli.model.hf_hub import HuggingFaceHub, _auto_class  # noqa: E402
from gradcam_cli.model.hf_towers import HfTowers  # noqa: E402
from gradcam_cli.model.load import build_model, load_model  # noqa: E402
from gradcam_cli.model.outputs import scores_view  # noqa: E402
from gradcam_cli.model.towers import block_norms, similarity_view, text_image_family  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
TOWERS = ("clip", "siglip", "siglip2")
TEXTS = ["a photo of a dog", "a photo of a cat", "the red square", "a blue circle of ball"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("towers")
    makers = {"clip": tiny_hf_clip, "siglip": tiny_hf_siglip, "siglip2": tiny_hf_siglip2, "dinov2": tiny_hf_dinov2}
    return {name: make(root / name) for name, make in makers.items()}


def built(folder: Path) -> tuple[Any, str]:
    model, _, arch = build_model(f"hf:{folder}", pretrained=True)
    return model.eval(), arch


def own_inputs(name: str, folder: Path, images: list[Any], texts: list[str]) -> dict[str, torch.Tensor]:
    """The images as the model's own processor gives them to its forward (SigLIP 2's: patches), the texts as its own
    tokenizer pads them for the model's training."""
    inputs = dict(transformers.AutoImageProcessor.from_pretrained(folder)(images=images, return_tensors="pt"))
    padding = "max_length" if name.startswith("siglip") else True
    return {**inputs, **transformers.AutoTokenizer.from_pretrained(folder)(texts, padding=padding, return_tensors="pt")}


def two_images(folder: Path) -> tuple[torch.Tensor, list[Any]]:
    """Two random IMAGE x IMAGE photos, as the family takes them (N, 3, H, W, normalised by the processor's statistics)
    and as PIL images."""
    from PIL import Image

    generator = torch.Generator().manual_seed(1)
    pixels = (torch.rand(2, IMAGE, IMAGE, 3, generator=generator) * 255).to(torch.uint8)
    settings = transformers.AutoImageProcessor.from_pretrained(folder).to_dict()
    mean, std = (torch.tensor(settings[key])[:, None, None] for key in ("image_mean", "image_std"))
    return (pixels.permute(0, 3, 1, 2).float() / 255 - mean) / std, [Image.fromarray(array.numpy()) for array in pixels]


@pytest.mark.parametrize("name", TOWERS)
def test_the_family_scores_as_the_models_own_forward(folders, name: str) -> None:
    """Image embeddings, text embeddings and the scale and bias, through the runs' similarity view, give the model's own
    logits_per_image (its processor's pixels, its tokenizer's ids), and the image side stays in the graph."""
    model, _ = built(folders[name])
    family = text_image_family(model)
    assert isinstance(family, HfTowers)
    x, images = two_images(folders[name])
    queries = family.embed_texts(model, TEXTS, torch.device("cpu"))
    assert queries.shape[0] == len(TEXTS) and queries.dtype == torch.float32 and not queries.requires_grad
    assert len(torch.unique(queries, dim=0)) == len(TEXTS)  # each text its own tokens (no word lost as unknown)
    view = similarity_view(model, family.embed_images, queries, *family.scale_and_bias(model))
    with torch.no_grad():
        expected = model(**own_inputs(name, folders[name], images, TEXTS)).logits_per_image
    x.requires_grad_(True)
    scores = view(x)
    torch.testing.assert_close(scores.detach(), expected, atol=1e-5, rtol=1e-5)
    scores[:, 0].sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0


@pytest.mark.parametrize(("name", "bias", "prefix"), [("clip", 0.0, 1), ("siglip", -2.5, 0), ("siglip2", -2.5, 0)])
def test_the_family_says_how_each_model_scores(folders, name: str, bias: float, prefix: int) -> None:
    model, arch = built(folders[name])
    family = HfTowers()
    scale, found_bias = family.scale_and_bias(model)
    assert scale == pytest.approx(float(model.logit_scale.detach().exp())) and found_bias == pytest.approx(bias)
    assert family.image_tower(model) == "vision_model"
    assert family.num_prefix_tokens(model) == prefix == HuggingFaceHub().num_prefix_tokens(model, arch)


@pytest.mark.parametrize("name", TOWERS)
def test_the_hub_builds_the_towers_with_their_preprocessing_and_layers(folders, name: str) -> None:
    from gradcam_cli.layers.defaults import default_layer_paths

    model, arch = built(folders[name])
    hub = HuggingFaceHub()
    assert type(model).__name__ == {"clip": "CLIPModel", "siglip": "SiglipModel", "siglip2": "Siglip2Model"}[name]
    assert model.__dict__["_gradcam_hf_location"] == str(folders[name])  # where its tokenizer is read
    config = hub.data_config(model, arch)
    assert config.input_hw == (IMAGE, IMAGE) and config.crop_pct == 1.0
    settings = transformers.AutoImageProcessor.from_pretrained(folders[name]).to_dict()
    assert config.mean == tuple(settings["image_mean"]) and config.std == tuple(settings["image_std"])
    assert config.interpolation == ("bilinear" if name == "siglip2" else "bicubic")
    norms = block_norms(model, "vision_model")
    assert norms == [f"vision_model.encoder.layers.{i}.layer_norm1" for i in range(2)]
    assert hub.default_layer(model, arch) == norms[-1] and hub.stage_layers(model, arch) == norms
    assert default_layer_paths(model, arch, hub, input_hw=(IMAGE, IMAGE)) == [norms[-1]]
    loaded = load_model(f"hf:{folders[name]}")
    assert isinstance(loaded.towers, HfTowers) and loaded.num_prefix_tokens == (1 if name == "clip" else 0)
    assert loaded.data_config == config


@pytest.mark.parametrize("name", TOWERS)
def test_a_prompt_run_scores_as_the_models_own_forward(folders, run_cli, tmp_path: Path, name: str) -> None:
    """`gradcam explain --model hf:DIR --prompt ...`: each prompt's score is the model's own logit for the photo (at
    the model's size, so our stretch and the processor's resize are both the identity), the map at the default layer."""
    from PIL import Image

    photo = write_image(tmp_path / "photo.png", IMAGE, IMAGE)
    prompts = ["a photo of a dog", "the red square"]
    result = run_cli("explain", photo, "--model", f"hf:{folders[name]}", *[a for p in prompts for a in ("--prompt", p)],
                     "--json", "-o", tmp_path / "out")  # fmt: skip
    assert result.code == 0, result.stderr
    (record,) = result.records()
    model, _ = built(folders[name])
    with torch.no_grad():
        expected = model(**own_inputs(name, folders[name], [Image.open(photo).convert("RGB")], prompts)).logits_per_image[0]
    assert record["target"] == "prompt" and record["layers"] == ["vision_model.encoder.layers.1.layer_norm1"]
    assert [t["class_name"] for t in record["targets"]] == prompts and not record["blank"]
    np.testing.assert_allclose([t["score"] for t in record["targets"]], expected.numpy(), atol=1e-4, rtol=0)


def test_a_base_model_saved_without_a_head_is_its_pooled_embedding(folders) -> None:
    """`Dinov2Model` builds as itself (not a classifier with a random head), read as its pooled (N, D) output."""
    model, arch = built(folders["dinov2"])
    assert type(model).__name__ == "Dinov2Model"
    x = torch.randn(2, 3, IMAGE, IMAGE)
    with torch.no_grad():
        pooled = model(pixel_values=x).pooler_output
        torch.testing.assert_close(scores_view(model)(x), pooled)
    assert pooled.shape == (2, 32)
    loaded = load_model(f"hf:{folders['dinov2']}")
    assert loaded.output == "pooler_output" and loaded.num_prefix_tokens == 1
    assert HuggingFaceHub().default_layer(model, arch) == "encoder.layer.1.norm1"


def test_which_auto_class_builds_a_config() -> None:
    """A CLIP-style config, or one saved from a class without a task head, is AutoModel's; a head's stays its own."""
    assert _auto_class(transformers, transformers.CLIPConfig()) is transformers.AutoModel
    assert _auto_class(transformers, transformers.ViTConfig(architectures=["ViTModel"])) is transformers.AutoModel
    headed = transformers.CLIPConfig(architectures=["CLIPForImageClassification"])
    assert _auto_class(transformers, headed) is transformers.AutoModelForImageClassification
    assert _auto_class(transformers, transformers.ViTConfig()) is transformers.AutoModelForImageClassification


def test_a_missing_tokenizer_is_one_line(folders, tmp_path: Path) -> None:
    """A folder with the model but no tokenizer (transformers 5 would make an empty CLIP one), and a model built
    without a folder: one line saying what to do."""
    bare = tmp_path / "no_tokenizer"
    bare.mkdir()
    for part in ("config.json", "model.safetensors", "preprocessor_config.json"):
        shutil.copy(folders["clip"] / part, bare / part)
    model, _ = built(bare)
    with pytest.raises(ModelError) as caught:
        HfTowers().embed_texts(model, ["a dog"], torch.device("cpu"))
    assert str(bare) in str(caught.value) and "\n" not in str(caught.value) and caught.value.hint
    config = copy.deepcopy(model.config)
    config._name_or_path = ""  # built from a config in memory: transformers knows no folder either
    unnamed = transformers.CLIPModel(config)
    with pytest.raises(ModelError, match="not built from a folder"):
        HfTowers().embed_texts(unnamed, ["a dog"], torch.device("cpu"))
