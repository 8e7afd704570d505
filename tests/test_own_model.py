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


def returns_int():
    return 7


instance = build()
not_a_model = 42
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


def test_kwargs_reach_the_factory_and_the_preprocessing_is_yours(run_cli, code: Path) -> None:
    given = ("--model-kwargs", "num_classes=5", "--input-size", "96x128", "--mean", "0.5", "--std", "0.5")
    result = run_cli("explain", "photo.png", "--model", "net.py:build", *given, "--topk", "5", "--json", "-o", "out")
    assert result.code == 0, result.stderr
    (record,) = result.records()
    assert len(record["targets"]) == 5 and len(record["topk"]) == 5
    assert "no preprocessing" not in result.stderr


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
        (("--model", "net.py:nothing"), "net.py has no 'nothing'; it has Featurizer, broken, build, instance"),
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
