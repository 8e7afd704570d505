"""The image-level Python API: load_model() and explain() give what `gradcam explain` writes, and leave the model alone."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import gradcam_cli
from conftest import EXAMPLES, ROOT, assert_left_as_found, model_state, require, write_image
from gradcam_cli.errors import GradcamError, InputError, LayerError, ModelError, UsageError

pytestmark = pytest.mark.usefixtures("one_thread")

NOTEBOOK = EXAMPLES / "explain.ipynb"


@pytest.fixture(scope="module")
def resnet():
    return gradcam_cli.load_model("test_resnet", pretrained=False, device="cpu")


@pytest.fixture
def photo(tmp_path: Path) -> Path:
    return write_image(tmp_path / "photo.png", 120, 84, seed=5)


def _png(path: str) -> np.ndarray:
    return np.asarray(Image.open(path).convert("RGB"))


def _without_paths(record: dict) -> dict:
    """A record less what only a written run has: input and output file names."""
    record = {k: v for k, v in record.items() if k not in ("input", "outputs")}
    record["targets"] = [{k: v for k, v in t.items() if k not in ("overlay", "raw", "guided")} for t in record["targets"]]
    return record


# Each case: the CLI's flags and explain()'s arguments for the same run. Together they cover the default run
# (whole image, top class, channels-last CNN), several classes with raw maps and the centre crop, a ViT with
# another method, explicit classes by name and index with another colour map, and the guided image.
CASES = {
    "default": ("test_resnet", [], {}),
    "topk-raw-crop": (
        "test_resnet",
        ["--topk", "2", "--norm", "none", "--no-relu", "--crop"],
        {"topk": 2, "norm": "none", "relu": False, "crop": True},
    ),
    "vit-gradcam++": ("test_vit", ["--method", "gradcam++", "--alpha", "0.3"], {"method": "gradcam++", "alpha": 0.3}),
    "named-classes": (
        "test_resnet",
        ["--class", "tabby", "--class", "3", "--colormap", "turbo", "--layer", "layer3"],
        {"classes": ["tabby", 3], "colormap": "turbo", "layers": "layer3"},
    ),
    "guided": ("test_resnet", ["--method", "guided-gradcam", "--save-guided"], {"method": "guided-gradcam"}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_explain_equals_what_the_cli_writes(case: str, run_cli, photo: Path, tmp_path: Path) -> None:
    """explain() gives the very .npy, overlay PNG, guided PNG and record `gradcam explain --save-raw` writes.

    Exact equality, no tolerance: both run the same functions on the same bytes in one process (same weights,
    seeded; same thread count; CPU kernels are deterministic), so any difference is a real divergence of the API.
    """
    name, flags, options = CASES[case]
    result = run_cli(
        "explain", photo, "--model", name, "--no-pretrained", "--device", "cpu", "--save-raw", "-o", tmp_path / "out", "--json", *flags
    )
    assert result.code == 0, result.stderr
    (cli,) = result.records()
    ours = gradcam_cli.explain(photo, gradcam_cli.load_model(name, pretrained=False, device="cpu"), **options)
    assert len(ours.targets) == len(cli["targets"])
    for target, written in zip(ours.targets, cli["targets"]):
        raw = np.load(written["raw"])
        assert raw.dtype == target.raw.dtype == np.float32 and raw.shape == target.raw.shape == (84, 120)
        assert np.array_equal(target.raw, raw)
        if options.get("norm", "minmax") == "minmax":
            assert target.map is target.raw
        assert np.array_equal(np.asarray(target.overlay), _png(written["overlay"]))
        if written["guided"]:
            assert np.array_equal(np.asarray(target.guided), _png(written["guided"]))
        else:
            assert target.guided is None
    assert _without_paths(dataclasses.asdict(ours.record)) == _without_paths(cli)
    assert ours.record.input == cli["input"] == str(photo)


def test_the_result_holds_maps_overlays_and_the_record(resnet, photo: Path) -> None:
    result = gradcam_cli.explain(photo, resnet, topk=3)
    assert [t.class_index for t in result.targets] == [t["index"] for t in result.record.topk[:3]]
    for target in result.targets:
        assert target.map.dtype == np.float32 and target.map.shape == (84, 120)
        assert 0.0 <= target.map.min() and target.map.max() <= 1.0 and not target.blank
        assert target.overlay.mode == "RGB" and target.overlay.size == (120, 84)
        assert target.class_name == resnet.class_names[target.class_index]
        assert (target.record.class_index, target.record.probability) == (target.class_index, target.probability)
        assert target.record.overlay is None and target.record.raw is None  # nothing was written
        assert not target.map.flags.writeable
    assert result.map is result.targets[0].map and result.overlay is result.targets[0].overlay
    assert (result.class_index, result.probability) == (result.record.class_index, result.record.probability)
    assert result.image.shape == (84, 120, 3) and result.image.dtype == np.uint8
    assert json.loads(result.record.to_json())["layers"] == ["layer4"]  # the family default, as cam() takes
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.targets = ()  # type: ignore[misc]
    assert result._repr_png_().startswith(b"\x89PNG")


def test_a_path_a_pil_image_and_an_array_give_the_same_map(resnet, photo: Path) -> None:
    from_path = gradcam_cli.explain(photo, resnet)
    with Image.open(photo) as image:
        from_pil = gradcam_cli.explain(image, resnet)
        pixels = np.array(image.convert("RGB"))  # a writable array of the caller's
    from_array = gradcam_cli.explain(pixels, resnet)
    assert np.array_equal(from_path.map, from_pil.map) and np.array_equal(from_path.map, from_array.map)
    assert (from_pil.record.input, from_array.record.input) == ("<PIL image>", "<array>")
    assert pixels.flags.writeable, "the caller's array is not made read-only"


def test_a_pil_image_is_turned_upright_as_a_file_is(resnet, tmp_path: Path) -> None:
    path = tmp_path / "turned.jpg"
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 degrees to show it upright
    Image.open(write_image(tmp_path / "w.png", 96, 64, seed=8)).save(path, exif=exif)
    from_file = gradcam_cli.explain(path, resnet)
    with Image.open(path) as image:
        from_pil = gradcam_cli.explain(image, resnet)
    assert from_file.map.shape == (96, 64)
    assert np.array_equal(from_file.map, from_pil.map)


def test_a_layer_module_is_the_same_as_its_path(resnet, photo: Path) -> None:
    by_module = gradcam_cli.explain(photo, resnet, layers=[resnet.model.layer3, "layer4"])
    by_path = gradcam_cli.explain(photo, resnet, layers=["layer3", "layer4"])
    assert by_module.record.layers == ["layer3", "layer4"]
    assert np.array_equal(by_module.map, by_path.map)


def test_load_model_places_the_model_as_a_run_does(resnet) -> None:
    import torch

    from gradcam_cli.model.load import LoadedModel

    assert isinstance(resnet, LoadedModel) and resnet.device == torch.device("cpu") and resnet.channels_last
    assert not resnet.model.training and resnet.data_config.input_hw == (160, 160)
    assert len(resnet.class_names) == 1000 and resnet.pretrained is False
    assert repr(resnet) == "ReadyModel('test_resnet', timm, device='cpu', classes=1000, input=160x160)"


@pytest.mark.parametrize("method", ["gradcam", "guided-gradcam", "eigencam", "fullgrad"])
def test_the_model_is_left_as_found(method: str, photo: Path) -> None:
    """Hooks, each module's train/eval flag, requires_grad, .grad and every weight and buffer, even set oddly."""
    ready = gradcam_cli.load_model("test_resnet", pretrained=False, device="cpu")
    model = ready.model
    model.train()
    model.bn1.eval()  # a fine-tuning set-up: train mode with a frozen BatchNorm
    next(model.parameters()).requires_grad_(False)
    before = model_state(model)
    gradcam_cli.explain(photo, ready, method=method)
    assert_left_as_found(model, before)
    with pytest.raises(UsageError, match="out of range"):
        gradcam_cli.explain(photo, ready, method=method, classes=5000)
    assert_left_as_found(model, before)


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda m, p: gradcam_cli.explain("missing.jpg", m), InputError, "missing.jpg: no such file"),
        (lambda m, p: gradcam_cli.explain(np.zeros((4, 4)), m), InputError, "4x4 float64, not RGB pixels"),
        (lambda m, p: gradcam_cli.explain(np.zeros((0, 4, 3), np.uint8), m), InputError, "has no pixels"),
        (lambda m, p: gradcam_cli.explain(b"bytes", m), InputError, "not bytes"),
        (lambda m, p: gradcam_cli.explain(p, m.model), UsageError, "what gradcam_cli.load_model() returned"),
        (lambda m, p: gradcam_cli.explain(p, m, classes="no such class"), UsageError, "is not a class of this model"),
        (lambda m, p: gradcam_cli.explain(p, m, classes=[1000]), UsageError, "class index 1000 is out of range"),
        (lambda m, p: gradcam_cli.explain(p, m, classes=1, topk=2), UsageError, "classes and topk exclude each other"),
        (lambda m, p: gradcam_cli.explain(p, m, method="gradcm"), UsageError, "method 'gradcm' is unknown"),
        (lambda m, p: gradcam_cli.explain(p, m, norm="max"), UsageError, "norm 'max' is unknown"),
        (lambda m, p: gradcam_cli.explain(p, m, alpha=2), UsageError, "alpha=2.0: must be between 0 and 1"),
        (lambda m, p: gradcam_cli.explain(p, m, alpha="opaque"), UsageError, "alpha 'opaque' (str): give a finite number"),
        (lambda m, p: gradcam_cli.explain(p, m, layers="layer9"), LayerError, "layer 'layer9' not found in test_resnet"),
        (lambda m, p: gradcam_cli.explain(p, m, layers=Image), LayerError, "is not a module of this model"),
        (lambda m, p: gradcam_cli.explain(p, m, max_pixels=100), InputError, "above max_pixels=100"),
        (lambda m, p: gradcam_cli.explain(p, m, precision="fp8"), UsageError, "precision 'fp8' is unknown"),
        (lambda m, p: gradcam_cli.explain(p, "test_resnet"), ModelError, "or pretrained=False for random weights"),
        (lambda m, p: gradcam_cli.load_model("test_resnet", weights="none.pth"), ModelError, "weights=none.pth: no such file"),
        (lambda m, p: gradcam_cli.load_model("test_resnet", weights=p), ModelError, "not a loadable tensor checkpoint"),
        (lambda m, p: gradcam_cli.load_model("test_resnet", labels="none.txt"), UsageError, "labels=none.txt: no such"),
        (lambda m, p: gradcam_cli.load_model("test_resnet", device="gpu"), UsageError, "device='gpu' is not a device"),
        (lambda m, p: gradcam_cli.load_model("  "), UsageError, "is not a model name"),
        (lambda m, p: gradcam_cli.load_model("resnt50", pretrained=False), UsageError, "did you mean 'resnet50'"),
        (lambda m, p: gradcam_cli.cam(m.model, np.zeros(1), layers="layer9"), LayerError, "layer 'layer9' not found"),
    ],
)
def test_bad_input_raises_a_package_error_in_the_api_words(call, error: type, words: str, resnet, photo: Path) -> None:
    with pytest.raises(error) as info:
        call(resnet, photo)
    assert isinstance(info.value, GradcamError)
    assert words in str(info.value)
    assert "--" not in str(info.value), "messages name arguments, not the CLI's flags"


def test_an_option_mark_is_an_argument_here_and_a_flag_on_the_command_line() -> None:
    """The library names options by marks; the API spells them as arguments, the CLI as its flags."""
    from gradcam_cli.option_words import as_flag

    error = LayerError("no map; name one with ⟨layers⟩", hint="or ⟨pretrained=False⟩, ⟨weights=FILE⟩, ⟨grid=HxW⟩, ⟨max_pixels~⟩")
    assert str(error) == "no map; name one with layers; or pretrained=False, weights=FILE, grid=HxW, max_pixels"
    assert error.spelled(as_flag) == (
        "no map; name one with --layer; or --no-pretrained, --weights FILE, --grid HxW, --max-pixels (preset key max_pixels)"
    )
    assert error.hint == "or ⟨pretrained=False⟩, ⟨weights=FILE⟩, ⟨grid=HxW⟩, ⟨max_pixels~⟩" and isinstance(error, ValueError)


def test_a_whole_network_method_says_it_ignores_layers(resnet, photo: Path) -> None:
    with pytest.warns(UserWarning, match="layers is ignored"):
        result = gradcam_cli.explain(photo, resnet, layers="layer3", method="fullgrad")
    assert result.record.layers[0].startswith("input + ")


@pytest.mark.slow
def test_the_api_names_are_lazy_and_torch_free() -> None:
    code = (
        "import sys, gradcam_cli; names = set(dir(gradcam_cli)); "
        "assert {'cam', 'explain', 'load_model', 'Explanation', 'ClassMap', 'ReadyModel'} <= names; "
        "assert gradcam_cli.GradcamError.__name__ == 'GradcamError'; "
        "print(','.join(m for m in ('torch', 'timm', 'cv2') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""
    assert gradcam_cli.explain.__module__ == "gradcam_cli.api"
    assert set(gradcam_cli.__all__) == {"__version__", *gradcam_cli._LAZY}


# ---------------------------------------------------------------- prompts and references


@pytest.fixture(scope="module")
def tiny_clip_ready():
    from test_prompts import TINY

    require("open_clip")
    return gradcam_cli.load_model("open_clip:ViT-B-32", pretrained=False, device="cpu", model_kwargs=TINY)


def test_explain_with_prompts_equals_what_the_cli_writes_and_each_map_says_its_prompt(tiny_clip_ready, run_cli, tmp_path: Path) -> None:
    from test_prompts import LAYER, TINY_ARGS, open_clip_input, square_images, tiny_clip

    import torch

    (photo,) = square_images(tmp_path / "in", 1)
    prompts = ["a photo of a dog", "a red square"]
    flags = [a for p in prompts for a in ("--prompt", p)]
    result = run_cli("explain", photo, *TINY_ARGS, *flags, "--save-raw", "--device", "cpu", "-o", tmp_path / "out", "--json")
    assert result.code == 0, result.stderr
    (cli,) = result.records()
    ours = gradcam_cli.explain(photo, tiny_clip_ready, prompts=prompts)
    assert _without_paths(dataclasses.asdict(ours.record)) == _without_paths(cli)
    assert ours.record.target == "prompt" and ours.record.layers == [LAYER]
    for target, written in zip(ours.targets, cli["targets"], strict=True):
        assert np.array_equal(target.raw, np.load(written["raw"]))
    assert [t.prompt for t in ours.targets] == [t.class_name for t in ours.targets] == prompts
    assert [t.similarity for t in ours.targets] == [t.score for t in ours.targets] == [t["score"] for t in cli["targets"]]
    assert all(t.probability is None for t in ours.targets)
    open_clip, model = require("open_clip"), tiny_clip()
    with torch.no_grad():
        image, text, scale = model(open_clip_input(photo), open_clip.get_tokenizer("ViT-B-32")(prompts))
    np.testing.assert_allclose([t.similarity for t in ours.targets], (scale * image @ text.T)[0].numpy(), atol=1e-5, rtol=0)
    alone = gradcam_cli.explain(photo, tiny_clip_ready, prompts=prompts[1])  # one text is a list of one, not its characters
    assert [t.prompt for t in alone.targets] == prompts[1:]
    np.testing.assert_allclose(alone.targets[0].map, ours.targets[1].map, atol=1e-5, rtol=0)


def test_explain_takes_a_prompt_file_and_labels_through_a_template(tiny_clip_ready, tmp_path: Path) -> None:
    from test_prompts import TINY

    photo = write_image(tmp_path / "photo.png", 64, 48, seed=2)
    listed = tmp_path / "prompts.txt"
    listed.write_text("# shapes\na ball\n\na box\n", encoding="utf-8")
    filed = gradcam_cli.explain(photo, tiny_clip_ready, prompts="a dog", prompt_file=listed)
    assert [t.prompt for t in filed.targets] == ["a dog", "a ball", "a box"]  # after the prompts, as the CLI reads it
    labels = tmp_path / "labels.txt"
    labels.write_text("dog\ncat\n", encoding="utf-8")
    zero_shot = gradcam_cli.load_model("open_clip:ViT-B-32", labels=labels, pretrained=False, device="cpu", model_kwargs=TINY)
    drawn = gradcam_cli.explain(photo, zero_shot, template="a drawing of a {}", topk=2)
    assert drawn.record.target == "class" and {t.class_name for t in drawn.targets} == {"dog", "cat"}
    assert all(t.prompt is None and t.similarity is None and 0 < t.probability < 1 for t in drawn.targets)  # a classifier's maps
    plain = gradcam_cli.explain(photo, zero_shot, topk=2)
    assert [t.score for t in plain.targets] != [t.score for t in drawn.targets]  # the template made other prompts


def test_explain_takes_references_and_each_map_says_its_similarity(tmp_path: Path) -> None:
    model = gradcam_cli.load_model("test_resnet", pretrained=False, device="cpu", model_kwargs={"num_classes": 0})
    photo, first, second = (write_image(tmp_path / f"{n}.png", 64, 48, seed=s) for n, s in (("photo", 1), ("a", 2), ("b", 3)))
    one = gradcam_cli.explain(photo, model, references=first)  # a path is a list of one
    (target,) = one.targets
    assert one.record.target == "reference" and one.record.references == [str(first)] and target.class_name == "a.png"
    assert target.prompt is None and target.similarity == target.score and -1 <= target.similarity <= 1
    both = gradcam_cli.explain(photo, model, references=[first, str(second)])  # Path or str, averaged into one concept
    assert len(both.targets) == 1 and both.record.references == [str(first), str(second)]
    assert both.targets[0].similarity != target.similarity
    classified = gradcam_cli.explain(photo, gradcam_cli.load_model("test_resnet", pretrained=False, device="cpu"))
    assert classified.targets[0].prompt is None and classified.targets[0].similarity is None


@pytest.mark.parametrize("given, says", [
    ({"prompts": 3}, "prompts=3 (int) is not what prompts takes: give a text, or a list of them"),
    ({"prompts": ["a", b"b"]}, "is not what prompts takes"),
    ({"references": 5}, "references=5 (int) is not what references takes: give an image file's path, or a list of them"),
    ({"prompts": "a dog", "template": "a {}"}, "template"),
])  # fmt: skip
def test_wrong_prompts_or_references_are_refused_saying_what_is_taken(tiny_clip_ready, photo: Path, given: dict, says: str) -> None:
    with pytest.raises(UsageError, match=re.escape(says)):
        gradcam_cli.explain(photo, tiny_clip_ready, **given)


def _code_cells(notebook: dict) -> list[str]:
    return ["".join(cell["source"]) for cell in notebook["cells"] if cell["cell_type"] == "code"]


def test_the_notebook_is_committed_without_outputs() -> None:
    notebook = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    code = [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]
    assert code and all(cell["outputs"] == [] and cell["execution_count"] is None for cell in code)
    assert "pretrained=PRETRAINED" in "".join(_code_cells(notebook)) and "PRETRAINED = False" in _code_cells(notebook)[0]


@pytest.mark.slow
def test_the_notebook_runs(tmp_path: Path) -> None:
    """Every code cell, in order, in one namespace, from a folder laid out like examples/ (the photo it opens)."""
    (tmp_path / "photos").mkdir()
    shutil.copy(EXAMPLES / "photos" / "cat.jpg", tmp_path / "photos" / "cat.jpg")
    namespace: dict = {"__name__": "__main__"}
    for index, source in enumerate(_code_cells(json.loads(NOTEBOOK.read_text(encoding="utf-8")))):
        exec(compile(source, f"{NOTEBOOK.name} cell {index + 1}", "exec"), namespace)  # noqa: S102 - our own notebook
    result = namespace["result"]
    assert isinstance(result, gradcam_cli.Explanation) and result.map.shape == (300, 451)
    assert tuple(namespace["maps"].shape) == (1, 224, 224)
