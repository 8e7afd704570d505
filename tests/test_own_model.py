"""A network of the user's own code: `--model net.py:build` or `package.module:build`, its kwargs, its preprocessing.

The models are written into the test's folder as a user writes them: a
torchvision ResNet wrapped in `nn.Sequential(featurizer, classifier)` with
frozen batch norms, the shape the issue names, which must need no ``--layer``.
Every way the user's code can fail is one line and exit 2.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import write_image

NET = """
import torch
import torchvision
from torch import nn


class Featurizer(nn.Module):
    def __init__(self):
        super().__init__()
        self.network = torchvision.models.resnet18(weights=None)
        self.network.fc = nn.Identity()

    def forward(self, x):
        return self.network(x)


def build(num_classes=3, width=512):
    torch.manual_seed(0)
    model = nn.Sequential(Featurizer(), nn.Linear(width, num_classes))
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.eval()
            module.requires_grad_(False)
    return model


def broken():
    raise ValueError("width must be even")


def binary():
    torch.manual_seed(0)
    return nn.Sequential(Featurizer(), nn.Linear(512, 1))


def returns_int():
    return 7


instance = build()
not_a_model = 42


def fixed(num_classes=3):
    # made for 64x64 only: its head flattens a 16x16 map
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(4), nn.Flatten(), nn.Linear(8 * 16 * 16, num_classes))


class Named(nn.Module):
    # returns {"features": ..., key: logits}; with pair (logits, probabilities); with none no tensor at all

    def __init__(self, key="logits", pair=False, none=False):
        super().__init__()
        self.inner, self.key, self.pair, self.none = build(), key, pair, none

    def forward(self, x):
        logits = self.inner(x)
        if self.none:
            return {"count": 3}
        if self.pair:
            return logits, logits.softmax(dim=1)
        return {"features": torch.zeros(x.shape[0], 2, 2, 2), self.key: logits}
"""


@pytest.fixture
def code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with net.py, a broken file, a file with a missing import, and a package; the current folder."""
    (tmp_path / "net.py").write_text(NET)
    (tmp_path / "bad.py").write_text("def build(:\n")
    (tmp_path / "needs.py").write_text("import missing_dependency_xyz\n")
    package = tmp_path / "mypkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "models.py").write_text("from net import build\n")
    write_image(tmp_path / "photo.png", 120, 96)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_your_network_explains_with_the_probe_layer_and_says_its_preprocessing(run_cli, code: Path) -> None:
    result = run_cli("explain", "photo.png", "--model", "net.py:build", "--json", "-o", "out")
    assert result.code == 0, result.stderr
    (record,) = result.records()
    assert record["ok"] and record["source"] == "code" and record["model"] == "net.py:build"
    assert record["layers"] == ["0.network.layer4"], "the last spatial module inside the wrapper, found by the probe"
    assert not record["blank"]
    assert result.stderr.count("comes with no preprocessing: assuming ImageNet's") == 1
    assert "--input-size, --mean, --std, --interpolation and --crop-pct" in result.stderr
    assert record["settings"]["pretrained"] is None, "your code's weights: not ours to call pretrained or random"
    assert json.loads((code / "out" / "runs.jsonl").read_text().splitlines()[0])["pretrained"] is None
    again = run_cli("explain", "photo.png", "--model", "net.py:build", "--no-pretrained", "--json", "-o", "again")
    assert again.code == 0 and "random (seeded) weights" not in again.stderr, again.stderr


def test_kwargs_reach_the_factory_and_the_preprocessing_is_yours(run_cli, code: Path) -> None:
    given = ("--model-kwargs", "num_classes=5", "--input-size", "96x128", "--mean", "0.5", "--std", "0.5")
    result = run_cli("explain", "photo.png", "--model", "net.py:build", *given, "--topk", "5", "--json", "-o", "out")
    assert result.code == 0, result.stderr
    (record,) = result.records()
    assert len(record["targets"]) == 5 and len(record["topk"]) == 5
    assert "no preprocessing" not in result.stderr


def test_the_preprocessing_notice_says_only_what_is_assumed(run_cli, code: Path) -> None:
    """Given --input-size alone, the run is not told that 224x224 is assumed: only the statistics it does assume."""
    result = run_cli("explain", "photo.png", "--model", "net.py:build", "--input-size", "96", "--json", "-o", "out")
    assert result.code == 0, result.stderr
    (notice,) = [line for line in result.stderr.splitlines() if "comes with no preprocessing" in line]
    assert "224x224" not in notice and "mean 0.485,0.456,0.406" in notice and "std 0.229,0.224,0.225" in notice


def test_a_model_made_for_another_size_finds_its_default_layer_at_that_size(run_cli, code: Path) -> None:
    """The default layer's probe runs at --input-size: a model whose head takes only 64x64 is not probed at 224x224."""
    result = run_cli("explain", "photo.png", "--model", "net.py:fixed", "--input-size", "64", "--json", "-o", "out")
    assert result.code == 0, result.stderr
    (record,) = result.records()
    assert record["ok"] and record["layers"] == ["2"], "the last module with a spatial output: the pooling"
    layers = run_cli("layers", "net.py:fixed", "--input-size", "64")
    assert layers.code == 0, layers.stderr


def test_cam_finds_its_default_layer_at_the_size_of_x(code: Path) -> None:
    import importlib.util

    import torch

    from gradcam_cli import cam

    spec = importlib.util.spec_from_file_location("own_model_fixed_net", code / "net.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    maps = cam(module.fixed(), torch.randn(2, 3, 64, 64))
    assert maps.shape == (2, 64, 64)


def test_a_package_module_and_the_python_api(run_cli, code: Path) -> None:
    from gradcam_cli import explain, load_model

    result = run_cli("explain", "photo.png", "--model", "mypkg.models:build", "--json", "-o", "out")
    assert result.code == 0, result.stderr
    with pytest.warns(UserWarning, match="no preprocessing"):
        ready = load_model("net.py:build", model_kwargs={"num_classes": 4}, device="cpu")
    assert ready.num_classes is None and ready.source.name == "code"
    quiet = load_model("net.py:build", input_hw=(64, 80), mean=(0.5, 0.5, 0.5), std=0.25, interpolation="bicubic", device="cpu")
    config = quiet.data_config
    assert config.input_hw == (64, 80) and config.mean == (0.5,) * 3 and config.std == (0.25,) * 3 and config.interpolation == "bicubic"
    assert explain("photo.png", quiet).map.shape == (96, 120)


def test_the_preprocessing_options_override_a_hub_model(code: Path) -> None:
    from gradcam_cli import load_model

    ready = load_model("test_resnet", pretrained=False, input_hw=96, mean=(127.5, 127.5, 127.5), crop_pct=0.9, device="cpu")
    assert ready.data_config.input_hw == (96, 96) and ready.data_config.mean == (0.5, 0.5, 0.5) and ready.data_config.crop_pct == 0.9
    assert ready.notices == []  # timm's models carry their own data config: nothing is guessed


def test_a_checkpoint_of_your_network_with_another_head(run_cli, code: Path) -> None:
    """The checkpoint's classifier has 7 classes: the factory is called with num_classes=7, then the weights load."""
    import sys

    from safetensors.torch import save_file

    sys.path.insert(0, str(code))
    try:
        import net
    finally:
        sys.path.remove(str(code))
    save_file(net.build(num_classes=7).state_dict(), str(code / "mine.safetensors"))
    given = ("--weights", "mine.safetensors", "--topk", "7")
    result = run_cli("explain", "photo.png", "--model", "net.py:build", *given, "--json", "-o", "out")
    assert result.code == 0, result.stderr
    assert len(result.records()[0]["targets"]) == 7


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--model", "missing.py:build"), "--model: no such file missing.py"),
        (("--model", "net.py:nothing"), "net.py has no 'nothing'; it has Featurizer, Named, binary, broken, build, fixed, instance"),
        (("--model", "net.py:broken"), "calling net.py:broken failed: ValueError: width must be even (net.py, line"),
        (("--model", "net.py:not_a_model"), "is of type int: neither a module nor something that builds one"),
        (("--model", "net.py:returns_int"), "returned an object of type int, not a torch.nn.Module"),
        (("--model", "bad.py:build"), "importing bad.py failed: it is not valid Python (bad.py, line 1"),
        (("--model", "needs.py:build"), "importing needs.py failed: ModuleNotFoundError: No module named 'missing_dependency_xyz'"),
        (("--model", "nosuchpkg.models:build"), "--model: no module named nosuchpkg"),
        (("--model", "net.py:instance", "--model-kwargs", "width=8"), "is a module instance: it takes no --model-kwargs"),
        (("--model", "net.py:build", "--model-kwargs", "width"), "--model-kwargs 'width' is not KEY=VALUE"),
        (("--model", "net.py:build", "--input-size", "big"), "--input-size 'big' is not a size like 224"),
        (("--model", "net.py:build", "--mean", "0.5,0.5"), "--mean '0.5,0.5' is not three numbers"),
        (("--model", "net.py:build", "--std", "0,1,1"), "--std '0,1,1' is not three numbers"),
        (("--model", "net.py:build", "--interpolation", "cubic"), "--interpolation 'cubic' is unknown"),
        (("--model", "net.py:build", "--crop-pct", "1.5"), "--crop-pct"),
    ],
)
def test_every_failure_of_your_code_is_one_line(run_cli, code: Path, args, says) -> None:
    result = run_cli("explain", "photo.png", *args, "-o", "out")
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.code == 2 and len(lines) == 1, result.stderr
    assert says in lines[0] and "Traceback" not in result.stderr


def test_the_records_say_the_source_of_every_model(run_cli, tmp_path: Path) -> None:
    image = write_image(tmp_path / "a.png")
    result = run_cli("explain", image, "--model", "test_resnet", "--no-pretrained", "--json", "-o", tmp_path / "out")
    assert json.loads(result.stdout.splitlines()[0])["source"] == "timm"


def test_layers_lists_your_network_and_paths_reach_inside_it(run_cli, code: Path) -> None:
    listed = run_cli("layers", "net.py:build", "--model-kwargs", "num_classes=9", "--input-size", "96", "--json")
    assert listed.code == 0, listed.stderr
    rows = {row["name"]: row for row in map(json.loads, listed.stdout.splitlines())}
    assert rows["(model)"]["shape"] == [1, 9] and rows["0.network.layer4"]["default"] is True
    assert rows["0.network.layer4"]["shape"] == [1, 512, 3, 3]  # probed at the --input-size given
    inner = run_cli("explain", "photo.png", "--model", "net.py:build", "--layer", "0.network.layer4.1.conv1", "--json", "-o", "out")
    assert inner.code == 0, inner.stderr
    assert inner.records()[0]["layers"] == ["0.network.layer4.1.conv1"]


def _saved_states(folder: Path) -> tuple[dict, dict]:
    """Two different state dicts of timm's test_resnet (random, seeded), as a training run would leave them."""
    import timm
    import torch

    states = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        states.append(timm.create_model("test_resnet", pretrained=False, num_classes=4).state_dict())
    return states[0], states[1]


def _probability(run_cli, *args) -> float:
    """The top probability with these weights; each set of weights writes into a folder of its own (a run never
    writes over another run's pictures)."""
    output = "out-" + "-".join(arg.strip("-").replace(".", "_") for arg in args)
    result = run_cli("explain", "photo.png", "--model", "test_resnet", *args, "--json", "-o", output)
    assert result.code == 0, result.stderr
    return result.records()[0]["topk"][0]["probability"]


def test_a_lightning_checkpoint_is_read_under_its_prefix_and_says_so(run_cli, code: Path) -> None:
    import torch

    plain, _ = _saved_states(code)
    torch.save(plain, code / "plain.pth")
    wrapped = {"model." + key: value for key, value in plain.items()} | {"criterion.pos_weight": torch.ones(4)}
    torch.save({"state_dict": wrapped, "epoch": 3, "global_step": 120, "hyper_parameters": {"lr": 0.1}}, code / "last.ckpt")
    result = run_cli("explain", "photo.png", "--model", "test_resnet", "--weights", "last.ckpt", "--json", "-o", "ckpt")
    assert result.code == 0, result.stderr
    assert "the model's weights are under 'model.' (a training wrapper's name), taken from there" in result.stderr
    assert "1 other tensors left out (criterion)" in result.stderr
    assert result.records()[0]["topk"][0]["probability"] == _probability(run_cli, "--weights", "plain.pth")


def test_ema_weights_with_ema_and_the_weights_without(run_cli, code: Path) -> None:
    import torch

    weights, averaged = _saved_states(code)
    torch.save({"state_dict": weights, "state_dict_ema": averaged, "epoch": 9}, code / "train.pth.tar")
    torch.save(averaged, code / "averaged.pth")
    torch.save(weights, code / "weights.pth")
    assert _probability(run_cli, "--weights", "train.pth.tar", "--ema") == _probability(run_cli, "--weights", "averaged.pth")
    assert _probability(run_cli, "--weights", "train.pth.tar") == _probability(run_cli, "--weights", "weights.pth")


@pytest.mark.parametrize(
    ("checkpoint", "args", "says"),
    [
        ("weights.pth", ("--ema",), "keeps no EMA weights (state_dict_ema, model_ema, ema_state_dict, ema); it holds"),
        ("elsewhere.ckpt", (), "does not fit this architecture (missing: "),
    ],
)
def test_checkpoints_that_do_not_fit_are_one_line(run_cli, code: Path, checkpoint: str, args, says) -> None:
    import torch

    weights, _ = _saved_states(code)
    torch.save(weights, code / "weights.pth")
    torch.save({"state_dict": {"backbone.encoder." + k: v for k, v in list(weights.items())[:5]}}, code / "elsewhere.ckpt")
    result = run_cli("explain", "photo.png", "--model", "test_resnet", "--weights", checkpoint, *args, "-o", "out")
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.code == 2 and len(lines) == 1 and says in lines[0], result.stderr


@pytest.mark.parametrize(
    ("kwargs", "output", "found"),
    [
        ((), (), "logits"),
        (("pair=true",), (), "0"),
        (('key="scores"',), ("--output", "scores"), "scores"),
        (("pair=true",), ("--output", "1"), "1"),
    ],
)
def test_whatever_the_forward_returns_the_scores_are_found(run_cli, code: Path, kwargs, output, found) -> None:
    """A dict with `logits`, a tuple, a key named by --output, an index: the record says which part held the scores."""
    given = [part for kwarg in kwargs for part in ("--model-kwargs", kwarg)]
    result = run_cli("explain", "photo.png", "--model", "net.py:Named", *given, *output, "--json", "-o", "out")
    assert result.code == 0, result.stderr
    (record,) = result.records()
    assert record["output"] == found and record["layers"] == ["inner.0.network.layer4"] and not record["blank"]


def test_the_view_is_the_same_network_and_hub_models_are_left_as_they_are(code: Path) -> None:
    import copy

    import torch

    from gradcam_cli import load_model

    ready = load_model("net.py:Named", model_kwargs={"pair": True}, input_hw=(64, 64), mean=0.5, std=0.5, device="cpu")
    inner = ready.model.inner
    assert dict(ready.model.named_modules())["inner.0.network.layer4"] is inner[0].network.layer4
    x = torch.rand(2, 3, 64, 64)
    with torch.no_grad():
        assert torch.equal(ready.model(x), inner(x))
        twin = copy.deepcopy(ready.model)  # as the sanity check copies it: the copy's forward runs the copy
        for parameter in twin.parameters():
            parameter.zero_()
        assert not torch.equal(twin(x), ready.model(x))
    hub = load_model("test_resnet", pretrained=False, device="cpu")
    assert hub.output is None and type(hub.model).forward is hub.model.forward.__func__


@pytest.mark.parametrize(
    ("kwargs", "output", "says"),
    [
        (("none=true",), (), "the model's forward returned a dict (keys: count): no tensor of class scores in it; name the part"),
        (('key="scores"',), (), "the model's class scores must be (N, classes); its 'features' is (1, 2, 2, 2)"),
        (("pair=true",), ("--output", "5"), "--output 5: the model's forward returned a tuple of 2 (Tensor, Tensor), and '5' is no tensor"),
        ((), ("--output", "probs"), "--output probs: the model's forward returned a dict (keys: features, logits)"),
    ],
)
def test_an_output_without_scores_is_one_line(run_cli, code: Path, kwargs, output, says) -> None:
    given = [part for kwarg in kwargs for part in ("--model-kwargs", kwarg)]
    result = run_cli("explain", "photo.png", "--model", "net.py:Named", *given, *output, "--input-size", "64", "--mean", "0.5",
                     "--std", "0.5", "-o", "out")  # fmt: skip
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.code == 2 and len(lines) == 1 and says in lines[0], result.stderr


def test_a_single_logit_binary_classifier_and_what_pushes_it_down(run_cli, code: Path) -> None:
    """One logit: its sigmoid is the probability, the map explains the positive class; --negative explains minus it,
    so without the ReLU and the normalisation Grad-CAM's raw map is exactly the other's negative."""
    import math

    import numpy as np

    raw = ("--no-relu", "--norm", "none", "--save-raw", "--json")
    positive = run_cli("explain", "photo.png", "--model", "net.py:binary", *raw, "-o", "pos")
    negative = run_cli("explain", "photo.png", "--model", "net.py:binary", *raw, "--negative", "-o", "neg")
    assert positive.code == 0 and negative.code == 0, positive.stderr + negative.stderr
    (up,), (down,) = positive.records(), negative.records()
    assert up["target"] == "binary" and down["target"] == "binary, negative" and up["class_index"] == 0
    assert up["probability"] == pytest.approx(1 / (1 + math.exp(-up["score"])), abs=1e-6)
    np.testing.assert_allclose(np.load(down["targets"][0]["raw"]), -np.load(up["targets"][0]["raw"]), atol=1e-6)
    hub = run_cli("explain", "photo.png", "--model", "test_resnet", "--no-pretrained", "--json", "-o", "hub")
    assert hub.records()[0]["target"] == "class"
