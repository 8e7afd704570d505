"""Text prompts and reference images as targets: open_clip models scored against prompts, zero-shot labels, and any
embedding model scored against reference images (run/matching.py, model/towers.py, model/open_clip_hub.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import require, write_image

pytestmark = pytest.mark.usefixtures("one_thread")

# a tiny ViT-B-32-shaped CLIP: 2 blocks of width 64 each side, 224x224 input (7x7 patches of 32), open_clip's own tokenizer
TINY = {
    "embed_dim": 64,
    "vision_cfg": {"layers": 2, "width": 64, "head_width": 32, "patch_size": 32, "image_size": 224},
    "text_cfg": {"layers": 2, "width": 64, "heads": 2, "context_length": 77, "vocab_size": 49408},
}
TINY_ARGS = [
    "--model",
    "open_clip:ViT-B-32",
    "--no-pretrained",
    *[a for k, v in TINY.items() for a in ("--model-kwargs", f"{k}={json.dumps(v)}")],
]
LAYER = "visual.transformer.resblocks.1.ln_1"


def tiny_clip() -> Any:
    """The same tiny model the CLI builds for TINY_ARGS (the hub seeds random weights with 0)."""
    open_clip = require("open_clip")
    torch.manual_seed(0)
    return open_clip.create_model("ViT-B-32", pretrained=None, **TINY).eval()


def records(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (folder / "records.jsonl").read_text().splitlines()]


def square_images(folder: Path, count: int = 2) -> list[Path]:
    """224x224 photos: the model's input size, so our stretch and open_clip's resize-and-crop are both the identity."""
    return [write_image(folder / f"photo{i}.png", 224, 224, seed=i) for i in range(count)]


def open_clip_input(path: Path) -> torch.Tensor:
    """The photo as open_clip's own preprocessing makes it (its image_transform, the model's mean and std)."""
    open_clip = require("open_clip")
    transform = open_clip.image_transform(224, is_train=False, mean=open_clip.OPENAI_DATASET_MEAN, std=open_clip.OPENAI_DATASET_STD)
    return transform(Image.open(path).convert("RGB"))[None]


def test_a_prompts_record_carries_the_similarity_as_open_clip_scores_it(tmp_path: Path, run_cli: Any) -> None:
    photos = square_images(tmp_path / "in")
    prompts = ["a photo of a dog", "a red square", "a ball"]
    result = run_cli("explain", *photos, *TINY_ARGS, *[a for p in prompts for a in ("--prompt", p)], "-o", tmp_path / "out")
    assert result.code == 0, result.stderr
    open_clip, model = require("open_clip"), tiny_clip()
    tokens = open_clip.get_tokenizer("ViT-B-32")(prompts)
    for photo, record in zip(photos, records(tmp_path / "out"), strict=True):
        with torch.no_grad():
            image, text, scale = model(open_clip_input(photo), tokens)  # open_clip's forward: normalised features, scale
        expected = (scale * image @ text.T)[0]
        assert record["target"] == "prompt" and record["layers"] == [LAYER]
        assert [t["class_name"] for t in record["targets"]] == prompts
        assert all(t["probability"] is None for t in record["targets"])
        np.testing.assert_allclose([t["score"] for t in record["targets"]], expected.numpy(), atol=1e-5, rtol=0)
        assert len(record["outputs"]) == 3 and all(Path(p).is_file() for p in record["outputs"])


class Similarity(torch.nn.Module):
    """The reference's wrapper target, written from open_clip's own calls: logit scale x cosine to fixed texts."""

    def __init__(self, model: Any, texts: torch.Tensor) -> None:
        super().__init__()
        self.model = model
        with torch.no_grad():
            self.texts = torch.nn.functional.normalize(model.encode_text(texts), dim=-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        image = torch.nn.functional.normalize(self.model.encode_image(x), dim=-1)
        return self.model.logit_scale.exp() * image @ self.texts.T


@pytest.mark.slow  # pytorch-grad-cam imports matplotlib, which asks fc-list for the fonts
def test_each_prompts_map_is_pytorch_grad_cams_of_that_similarity(tmp_path: Path) -> None:
    require("pytorch_grad_cam")
    from pytorch_grad_cam import GradCAM
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    from gradcam_cli.run.prepare import prepare_run
    from gradcam_cli.settings import build_settings

    open_clip = require("open_clip")
    prompts = ["a dog", "a cat", "a ball"]
    kwargs = [f"{k}={json.dumps(v)}" for k, v in TINY.items()]
    settings = build_settings({"model": "open_clip:ViT-B-32", "pretrained": False, "model_kwargs": kwargs, "prompts": prompts})
    run = prepare_run(settings)
    x = torch.cat([open_clip_input(p) for p in square_images(tmp_path)])
    ours = run.compute(x).to_cpu()
    model = tiny_clip()
    reference = Similarity(model, open_clip.get_tokenizer("ViT-B-32")(prompts))

    def tokens_to_grid(tokens: torch.Tensor) -> torch.Tensor:  # the CLIP example's hand-written reshape: class token dropped
        return tokens[:, 1:, :].reshape(tokens.size(0), 7, 7, tokens.size(2)).permute(0, 3, 1, 2)

    layer = model.visual.transformer.resblocks[-1].ln_1
    with GradCAM(model=reference, target_layers=[layer], reshape_transform=tokens_to_grid) as cam:
        for k in range(len(prompts)):
            theirs = cam(input_tensor=x, targets=[ClassifierOutputTarget(k)] * len(x))
            assert (ours.maps[:, k].flatten(1).amax(1) > 0.99).all()  # real maps, not two blank ones agreeing
            np.testing.assert_allclose(ours.maps[:, k].numpy(), theirs, atol=1e-4, rtol=0)
    assert not torch.allclose(ours.maps[:, 0], ours.maps[:, 1], atol=1e-2)  # and the prompt matters


def test_zero_shot_labels_make_an_ordinary_classifier_with_truth_and_a_report(tmp_path: Path, run_cli: Any) -> None:
    for index, label in enumerate(("circle", "square")):
        for i in range(2):
            write_image(tmp_path / "in" / label / f"{i}.png", 160, 120, seed=10 * index + i)
    (tmp_path / "labels.txt").write_text("circle\nsquare\nstar\n")
    result = run_cli("explain", tmp_path / "in", "-r", *TINY_ARGS, "--labels", tmp_path / "labels.txt", "--template", "a drawing of a {}",
                     "--topk", "2", "-o", tmp_path / "out", "--report")  # fmt: skip
    assert result.code == 0, result.stderr
    found = records(tmp_path / "out")
    assert len(found) == 4
    for record in found:
        assert record["target"] == "class"
        assert record["true_class"] in ("circle", "square") and isinstance(record["correct"], bool)
        assert len(record["targets"]) == 2 and {t["class_name"] for t in record["targets"]} <= {"circle", "square", "star"}
        probabilities = [entry["probability"] for entry in record["topk"]]
        assert len(probabilities) == 3 and abs(sum(probabilities) - 1) < 1e-4  # a softmax over the labels' prompts
    page = (tmp_path / "out" / "report" / "index.html").read_text()
    assert "confusion" in page.lower() or "confusion" in (tmp_path / "out" / "report" / "data.js").read_text().lower()


def test_the_zero_shot_scores_are_the_templates_prompts_scores(tmp_path: Path, run_cli: Any) -> None:
    photos = square_images(tmp_path / "in", 1)
    (tmp_path / "labels.txt").write_text("dog\ncat\n")
    zero_shot = run_cli("explain", *photos, *TINY_ARGS, "--labels", tmp_path / "labels.txt", "--topk", "2", "-o", tmp_path / "a")
    prompted = run_cli(
        "explain", *photos, *TINY_ARGS, "--prompt", "a photo of a dog.", "--prompt", "a photo of a cat.", "-o", tmp_path / "b"
    )
    assert zero_shot.code == prompted.code == 0
    by_label = {t["class_name"]: t["score"] for t in records(tmp_path / "a")[0]["targets"]}
    by_prompt = {t["class_name"]: t["score"] for t in records(tmp_path / "b")[0]["targets"]}
    assert by_label == {"dog": by_prompt["a photo of a dog."], "cat": by_prompt["a photo of a cat."]}


def test_a_prompt_file_adds_its_lines_after_the_prompts(tmp_path: Path, run_cli: Any) -> None:
    (tmp_path / "prompts.txt").write_text("# animals\na dog\n\na cat\n")
    photo = square_images(tmp_path / "in", 1)[0]
    result = run_cli("explain", photo, *TINY_ARGS, "--prompt", "a ball", "--prompt-file", tmp_path / "prompts.txt", "-o", tmp_path / "out")
    assert result.code == 0, result.stderr
    assert [t["class_name"] for t in records(tmp_path / "out")[0]["targets"]] == ["a ball", "a dog", "a cat"]


def test_the_default_layer_is_the_image_towers_last_norm_before_attention(run_cli: Any) -> None:
    result = run_cli("layers", *TINY_ARGS[1:2], *[a for a in TINY_ARGS[3:]])
    assert result.code == 0, result.stderr
    assert f"default target: {LAYER}" in result.stderr and f"{LAYER}  LayerNorm" in result.stdout


class Quadrant(torch.nn.Module):
    """An embedding model whose embedding reads only the top-left quadrant of its feature map: what makes two images
    similar can only be there."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.features = torch.nn.Conv2d(3, 16, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        maps = torch.relu(self.features(x))
        h, w = maps.shape[-2:]
        return maps[:, :, : h // 2, : w // 2].mean(dim=(2, 3))


def test_a_reference_map_lies_where_the_embedding_reads_the_image(tmp_path: Path, run_cli: Any) -> None:
    (tmp_path / "net.py").write_text("from test_prompts import Quadrant\n\ndef build():\n    return Quadrant()\n")
    photos = [write_image(tmp_path / f"photo{i}.png", 128, 96, seed=i) for i in range(3)]
    result = run_cli("explain", photos[0], photos[1], "--model", f"{tmp_path / 'net.py'}:build", "--input-size", "64", "--reference",
                     photos[2], "--method", "hirescam", "--layer", "features", "--save-raw", "-o", tmp_path / "out")  # fmt: skip
    assert result.code == 0, result.stderr
    for record in records(tmp_path / "out"):
        assert record["target"] == "reference" and record["references"] == [str(photos[2])]
        raw = np.load(record["targets"][0]["raw"])
        h, w = raw.shape
        assert raw[: h // 2, : w // 2].sum() > 0.99 * raw.sum() > 0  # the similarity's evidence: the quadrant it reads


def test_several_references_make_one_concept_their_mean_embedding(tmp_path: Path, run_cli: Any) -> None:
    import timm

    from gradcam_cli.geometry import plan_geometry, to_input_array
    from gradcam_cli.model.data_config import DataConfig

    photos = [write_image(tmp_path / f"photo{i}.png", 64, 64, seed=i) for i in range(3)]
    common = ["--model", "resnet18", "--no-pretrained", "--model-kwargs", "num_classes=0", "--input-size", "64", "-o", tmp_path / "out"]
    result = run_cli("explain", photos[0], *common, "--reference", photos[1], "--reference", photos[2])
    negative = run_cli(
        "explain", photos[0], *common[:-1], tmp_path / "negative", "--reference", photos[1], "--reference", photos[2], "--negative"
    )
    assert result.code == negative.code == 0, result.stderr + negative.stderr
    torch.manual_seed(0)
    model = timm.create_model("resnet18", pretrained=False, num_classes=0).eval()
    config = DataConfig(input_hw=(64, 64), mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225), interpolation="bicubic", crop_pct=0.875)

    def embedded(path: Path) -> torch.Tensor:
        photo = np.asarray(Image.open(path).convert("RGB"))
        with torch.no_grad():
            return torch.nn.functional.normalize(
                model(torch.from_numpy(to_input_array(photo, plan_geometry(photo.shape[:2], config), config))[None]), dim=-1
            )[0]

    concept = (embedded(photos[1]) + embedded(photos[2])) / 2
    expected = float(embedded(photos[0]) @ concept / concept.norm())
    record = records(tmp_path / "out")[0]
    assert record["class_name"] == "photo1.png + 1 more" and record["references"] == [str(photos[1]), str(photos[2])]
    assert record["score"] == pytest.approx(expected, abs=1e-5)
    assert records(tmp_path / "negative")[0]["target"] == "reference, negative"


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--model", "resnet18", "--no-pretrained", "--prompt", "a dog"], "--prompt: resnet18 has no text tower"),
        ([*TINY_ARGS, "--prompt", "  "], "--prompt: a prompt is empty"),
        ([*TINY_ARGS, "--prompt", "a dog", "--class", "0"], "--class picks a classifier's class"),
        ([*TINY_ARGS, "--labels", "LABELS", "--template", "a photo"], "--template 'a photo' needs one {}"),
        ([*TINY_ARGS, "--template", "a {}"], "--template makes each of the --labels a prompt"),
        ([*TINY_ARGS], "is a CLIP-style model: it scores images against texts"),
        ([*TINY_ARGS, "--prompt", "a dog", "--reference", "PHOTO"], "give one of them"),
        (["--model", "resnet18", "--no-pretrained", "--reference", "MISSING"], "--reference: MISSING: no such file"),
        (["--model", "resnet18", "--no-pretrained", "--reference", "NOT_AN_IMAGE"], "--reference: NOT_AN_IMAGE"),
        (["--model", "resnet18", "--no-pretrained", "--model-kwargs", "num_classes=0", "--reference", "PHOTO", "--truth", "TRUTH"],
         "--truth names each image's class"),
    ],
)  # fmt: skip
def test_bad_prompts_and_references_are_one_line(tmp_path: Path, run_cli: Any, extra: list[str], said: str) -> None:
    photo = write_image(tmp_path / "photo.png", 64, 64)
    (tmp_path / "labels.txt").write_text("dog\ncat\n")
    (tmp_path / "notes.png").write_text("not an image")
    (tmp_path / "truth.csv").write_text("photo.png,dog\n")
    named = {
        "TRUTH": str(tmp_path / "truth.csv"),
        "LABELS": str(tmp_path / "labels.txt"),
        "PHOTO": str(photo),
        "MISSING": "missing.png",
        "NOT_AN_IMAGE": str(tmp_path / "notes.png"),
    }
    args = [named.get(a, a) for a in extra]
    said = said.replace("MISSING", "missing.png").replace("NOT_AN_IMAGE", str(tmp_path / "notes.png"))
    result = run_cli("explain", photo, *args, "-o", tmp_path / "out")
    assert result.code == 2, result.stderr
    assert said in result.stderr and len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()  # refused before any image


def test_eval_scores_each_image_and_prompt_by_its_similarity(tmp_path: Path, run_cli: Any) -> None:
    photos = square_images(tmp_path / "in", 2)
    result = run_cli("eval", *photos, *TINY_ARGS, "--prompt", "a dog", "--prompt", "a cat", "--methods", "gradcam", "--metrics",
                     "deletion,insertion", "--steps", "4", "-o", tmp_path / "out")  # fmt: skip
    assert result.code == 0, result.stderr
    units = [r for r in records(tmp_path / "out") if not r["baseline"]]
    assert sorted((Path(r["input"]).name, r["class_name"]) for r in units) == sorted(
        (p.name, prompt) for p in photos for prompt in ("a dog", "a cat")
    )
    explained = run_cli("explain", *photos, *TINY_ARGS, "--prompt", "a dog", "--prompt", "a cat", "-o", tmp_path / "explained")
    assert explained.code == 0
    scores = {(Path(r["input"]).name, t["class_name"]): t["score"] for r in records(tmp_path / "explained") for t in r["targets"]}
    for unit in units:  # the deletion curve starts at the unperturbed similarity, the score explain's record carries
        score = scores[(Path(unit["input"]).name, unit["class_name"])]
        assert unit["target"] == "prompt" and unit["probability"] is None and unit["score"] == pytest.approx(score, abs=1e-5)
        assert unit["curves"]["deletion"][0] == pytest.approx(score, abs=1e-4)


def test_a_picture_of_another_prompt_is_another_runs(tmp_path: Path, run_cli: Any) -> None:
    photo = square_images(tmp_path / "in", 1)[0]
    first = run_cli("explain", photo, *TINY_ARGS, "--prompt", "a dog", "-o", tmp_path / "out")
    again = run_cli("explain", photo, *TINY_ARGS, "--prompt", "a dog", "-o", tmp_path / "out", "--skip-existing")
    other = run_cli("explain", photo, *TINY_ARGS, "--prompt", "a cat", "-o", tmp_path / "out", "--skip-existing")
    assert first.code == again.code == 0 and "skipped" in again.stderr
    assert other.code != 0 and "was made by another run (prompts a dog, this run a cat)" in other.stderr


def test_a_resnet_towers_default_layer_is_its_last_stage_before_attention_pooling(tmp_path: Path, run_cli: Any) -> None:
    tower = {"embed_dim": 32, "vision_cfg": {"layers": [1, 1, 1, 1], "width": 16, "image_size": 64},
             "text_cfg": {"layers": 1, "width": 32, "heads": 2, "context_length": 77, "vocab_size": 49408}}  # fmt: skip
    kwargs = [a for k, v in tower.items() for a in ("--model-kwargs", f"{k}={json.dumps(v)}")]
    photo = write_image(tmp_path / "photo.png", 64, 64)
    result = run_cli("explain", photo, "--model", "open_clip:RN50", "--no-pretrained", *kwargs, "--prompt", "a dog", "-o", tmp_path / "out")
    assert result.code == 0, result.stderr
    assert records(tmp_path / "out")[0]["layers"] == ["visual.layer4"]


def test_the_console_says_each_prompts_score(tmp_path: Path, run_cli: Any) -> None:
    photo = square_images(tmp_path / "in", 1)[0]
    result = run_cli("explain", photo, *TINY_ARGS, "--prompt", "a dog", "--prompt", "a ball", "-o", tmp_path / "out", "--no-json")
    assert result.code == 0, result.stderr
    scores = [t["score"] for t in records(tmp_path / "out")[0]["targets"]]
    assert f'"a dog" {scores[0]:.4g}, "a ball" {scores[1]:.4g}' in result.stdout


@pytest.mark.parametrize(("name", "said"), [
    ("open_clip:ViT-B-33", "unknown open_clip model 'ViT-B-33' (did you mean 'ViT-B-32'"),
    ("open_clip:ViT-B-32/laion9000", "'laion9000' is not a pretrained tag of open_clip's 'ViT-B-32'; its tags: openai, "),
])  # fmt: skip
def test_an_unknown_open_clip_name_or_tag_is_one_line(
    tmp_path: Path, run_cli: Any, monkeypatch: pytest.MonkeyPatch, name: str, said: str
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # nothing is asked of the hub: the name and tag are checked first
    result = run_cli("explain", write_image(tmp_path / "photo.png"), "--model", name, "--prompt", "a dog", "-o", tmp_path / "out")
    assert result.code == 2 and said in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


class Embedder(torch.nn.Module):
    """A model of the user's whose forward returns a dict: the embedding is one entry of it, which ⟨output⟩ names."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.features = torch.nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        maps = torch.relu(self.features(x))
        return {"logits": maps.mean(dim=(2, 3))[:, :2], "embedding": maps.amax(dim=(2, 3))}


def test_output_picks_the_embedding_a_reference_is_compared_by(tmp_path: Path, run_cli: Any) -> None:
    (tmp_path / "net.py").write_text("from test_prompts import Embedder\n\ndef build():\n    return Embedder()\n")
    photos = [write_image(tmp_path / f"photo{i}.png", 64, 64, seed=i) for i in range(2)]
    common = ["--model", f"{tmp_path / 'net.py'}:build", "--input-size", "64", "--reference", photos[1], "--layer", "features"]
    result = run_cli("explain", photos[0], *common, "--output", "embedding", "-o", tmp_path / "out")
    assert result.code == 0, result.stderr
    from gradcam_cli.geometry import plan_geometry, to_input_array
    from gradcam_cli.model.data_config import IMAGENET_MEAN, IMAGENET_STD, DataConfig

    config = DataConfig(input_hw=(64, 64), mean=IMAGENET_MEAN, std=IMAGENET_STD)
    model = Embedder().eval()

    def embedded(path: Path) -> torch.Tensor:
        photo = np.asarray(Image.open(path).convert("RGB"))
        with torch.no_grad():
            return model(torch.from_numpy(to_input_array(photo, plan_geometry(photo.shape[:2], config), config))[None])["embedding"][0]

    record = records(tmp_path / "out")[0]
    assert record["target"] == "reference" and record["output"] == "embedding"
    expected = torch.nn.functional.cosine_similarity(embedded(photos[0]), embedded(photos[1]), dim=0)
    assert record["score"] == pytest.approx(float(expected), abs=1e-5)


def test_a_headless_hf_model_is_compared_by_its_pooled_embedding(tmp_path: Path, run_cli: Any) -> None:
    from clip_models import tiny_hf_dinov2

    folder = tiny_hf_dinov2(tmp_path / "dinov2")
    photos = [write_image(tmp_path / f"photo{i}.png", 64, 64, seed=i) for i in range(2)]
    result = run_cli("explain", photos[0], "--model", f"hf:{folder}", "--no-pretrained", "--reference", photos[1], "-o", tmp_path / "out")
    assert result.code == 0, result.stderr
    record = records(tmp_path / "out")[0]
    assert record["target"] == "reference" and -1 <= record["score"] <= 1 and not record["blank"]


def test_zero_shot_labels_evaluate_as_a_classifier(tmp_path: Path, run_cli: Any) -> None:
    (tmp_path / "labels.txt").write_text("dog\ncat\n")
    result = run_cli("eval", *square_images(tmp_path / "in", 2), *TINY_ARGS, "--labels", tmp_path / "labels.txt", "--methods", "gradcam",
                     "--metrics", "deletion", "--steps", "4", "-o", tmp_path / "out")  # fmt: skip
    assert result.code == 0, result.stderr
    units = [r for r in records(tmp_path / "out") if not r["baseline"]]
    assert len(units) == 2 and all(r["class_name"] in ("dog", "cat") and 0 <= r["probability"] <= 1 for r in units)


class Picky(torch.nn.Module):
    """A model that passes the blank probe at load, then fails on any real image, as a model of a fixed input size does."""

    def __init__(self) -> None:
        super().__init__()
        self.features = torch.nn.Conv2d(3, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.std() > 0:
            raise ValueError("this model takes only blank images")
        return self.features(x).mean(dim=(2, 3))


def test_a_model_failing_on_the_references_is_one_line(tmp_path: Path, run_cli: Any) -> None:
    (tmp_path / "net.py").write_text("from test_prompts import Picky\n\ndef build():\n    return Picky()\n")
    photo = write_image(tmp_path / "photo.png", 64, 64)
    result = run_cli("explain", photo, "--model", f"{tmp_path / 'net.py'}:build", "--reference", photo, "-o", tmp_path / "out")
    assert result.code != 0 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "failed to embed the reference images: ValueError: this model takes only blank images" in result.stderr


def test_the_prompts_are_embedded_once_per_run_not_per_batch(tmp_path: Path, run_cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from gradcam_cli.model.open_clip_towers import OpenClipTowers

    calls: list[int] = []
    embed = OpenClipTowers.embed_texts
    monkeypatch.setattr(
        OpenClipTowers, "embed_texts", lambda self, model, texts, device: calls.append(len(texts)) or embed(self, model, texts, device)
    )
    photos = square_images(tmp_path / "in", 3)
    result = run_cli("explain", *photos, *TINY_ARGS, "--prompt", "a dog", "--prompt", "a cat", "-b", "1", "-o", tmp_path / "out")
    assert result.code == 0, result.stderr
    assert calls == [2] and len(records(tmp_path / "out")) == 3  # three batches of one image, the two prompts embedded once
