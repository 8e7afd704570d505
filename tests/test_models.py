"""Models and weights: local checkpoints (safetensors, wrapped .pth, DDP prefixes),
class counts and names, refused pickles, offline pretrained weights, devices.

No test may reach a network: conftest switches the hubs offline and points
every cache at an empty folder; the pretrained-weights tests also send HTTP(S)
to a closed local port, so even a connected machine fails fast and offline.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import write_image

LABELS = ("circle", "square", "triangle")


@pytest.fixture(scope="module")
def three_class_state():
    """A test_resnet with 3 classes and non-default weights (so loading is visible)."""
    import timm
    import torch

    torch.manual_seed(1)
    model = timm.create_model("test_resnet", pretrained=False, num_classes=3)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.01 * torch.randn_like(parameter))
    return {k: v.clone().contiguous() for k, v in model.state_dict().items()}


@pytest.fixture
def image(tmp_path: Path) -> Path:
    return write_image(tmp_path / "in.png", 64, 48, seed=21)


@pytest.fixture
def labels_file(tmp_path: Path) -> Path:
    path = tmp_path / "labels.txt"
    path.write_text("\n".join(LABELS) + "\n", encoding="utf-8")
    return path


def save_safetensors(state, path: Path) -> Path:
    from safetensors.torch import save_file

    save_file(state, str(path))
    return path


def assert_loaded(state, weights: Path) -> None:
    import torch

    from gradcam_cli.model.load import load_model

    loaded = load_model("test_resnet", pretrained=False, weights=weights)
    own = loaded.model.state_dict()
    assert set(own) == set(state)
    for key, value in state.items():
        assert torch.equal(own[key], value), key
    assert loaded.model.fc.out_features == 3


def explain(run_cli, tmp_path: Path, image: Path, *args):
    return run_cli("explain", "-m", "test_resnet", "--json", "-o", tmp_path / "out", image, *args)


# ---------------------------------------------------------------- local weights


def test_safetensors_weights_with_three_classes(run_cli, tmp_path, image, three_class_state):
    weights = save_safetensors(three_class_state, tmp_path / "three.safetensors")
    assert_loaded(three_class_state, weights)
    result = explain(run_cli, tmp_path, image, "--weights", weights)
    assert result.code == 0, result.stderr
    (record,) = result.records()
    assert record["class_index"] in (0, 1, 2)
    assert sorted(entry["index"] for entry in record["topk"]) == [0, 1, 2]
    assert record["settings"]["weights"] == str(weights) and record["settings"]["pretrained"] is False


def test_pth_wrapped_in_state_dict_with_ddp_prefixes(run_cli, tmp_path, image, three_class_state):
    import torch

    weights = tmp_path / "ddp.pth"
    torch.save({"epoch": 3, "state_dict": {f"module.{k}": v for k, v in three_class_state.items()}}, weights)
    assert_loaded(three_class_state, weights)
    result = explain(run_cli, tmp_path, image, "--weights", weights)
    assert result.code == 0, result.stderr
    assert len(result.records()[0]["topk"]) == 3


def test_labels_name_the_classes(run_cli, tmp_path, image, labels_file, three_class_state):
    weights = save_safetensors(three_class_state, tmp_path / "three.safetensors")
    result = explain(run_cli, tmp_path, image, "--weights", weights, "--labels", labels_file, "--class", "square")
    assert result.code == 0, result.stderr
    (record,) = result.records()
    assert (record["class_index"], record["class_name"]) == (1, "square")
    assert {entry["name"] for entry in record["topk"]} == set(LABELS)


def test_labels_with_the_wrong_count_are_a_usage_error(run_cli, tmp_path, image, three_class_state):
    weights = save_safetensors(three_class_state, tmp_path / "three.safetensors")
    labels = tmp_path / "two.txt"
    labels.write_text("circle\nsquare\n", encoding="utf-8")
    result = explain(run_cli, tmp_path, image, "--weights", weights, "--labels", labels)
    assert result.code == 2
    (line,) = result.stderr.strip().splitlines()
    assert "2 classes" in line and "3 outputs" in line
    assert not (tmp_path / "out").exists()


def test_labels_with_a_byte_order_mark(tmp_path):
    """Windows editors start UTF-8 files with a BOM; it must not become part of the first class name."""
    from gradcam_cli.model.labels import read_labels

    path = tmp_path / "bom.txt"
    path.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(LABELS).encode() + b"\r\n")
    assert read_labels(path) == list(LABELS)
    path.write_text("circle\n\ufeffsquare \ntriangle\n", encoding="utf-8")  # files joined with `cat`
    assert read_labels(path) == list(LABELS)


def test_class_by_name_from_labels_with_a_byte_order_mark(run_cli, tmp_path, image, three_class_state):
    weights = save_safetensors(three_class_state, tmp_path / "three.safetensors")
    labels = tmp_path / "bom.txt"
    labels.write_bytes(b"\xef\xbb\xbf" + "\n".join(LABELS).encode() + b"\n")
    result = explain(run_cli, tmp_path, image, "--weights", weights, "--labels", labels, "--class", "circle")
    assert result.code == 0, result.stderr
    (record,) = result.records()
    assert (record["class_index"], record["class_name"]) == (0, "circle")
    assert {entry["name"] for entry in record["topk"]} == set(LABELS)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "bool"])
def test_integer_or_bool_weights_are_refused_by_name(run_cli, tmp_path, image, three_class_state, dtype):
    """load_state_dict would cast them into the float parameters without a word."""
    import torch

    state = dict(three_class_state)
    state["fc.weight"] = (state["fc.weight"] * 100).to(getattr(torch, dtype))
    weights = save_safetensors(state, tmp_path / f"{dtype}.safetensors")
    result = explain(run_cli, tmp_path, image, "--weights", weights)
    assert result.code == 2
    (line,) = result.stderr.strip().splitlines()
    assert f"--weights {weights}: tensor 'fc.weight' is {dtype}" in line
    assert "quantized" in line and "give the float weights" in line
    assert "Traceback" not in result.stderr


def test_integer_buffers_still_load(three_class_state, tmp_path):
    """BatchNorm's num_batches_tracked is int64 in the model too: nothing to refuse."""
    import torch

    from gradcam_cli.model.load import load_model

    assert three_class_state["bn1.num_batches_tracked"].dtype == torch.int64
    state = dict(three_class_state, **{"bn1.num_batches_tracked": torch.tensor(7)})
    weights = tmp_path / "counted.pth"
    torch.save(state, weights)
    loaded = load_model("test_resnet", pretrained=False, weights=weights)
    assert int(loaded.model.state_dict()["bn1.num_batches_tracked"]) == 7


class Payload:
    """Unpickling this creates a file: the proof that code inside a pickle ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_pickled_code_in_pth_is_refused_and_never_runs(run_cli, tmp_path, image, three_class_state):
    import torch

    marker = tmp_path / "pwned"
    weights = tmp_path / "evil.pth"
    torch.save({"state_dict": three_class_state, "extra": Payload(marker)}, weights)

    result = explain(run_cli, tmp_path, image, "--weights", weights)
    assert result.code == 2
    (line,) = result.stderr.strip().splitlines()
    assert str(weights) in line and "not a loadable tensor checkpoint" in line
    assert "Traceback" not in result.stderr
    assert not marker.exists()

    # the payload is real: an unsafe load would have run it
    proof = tmp_path / "proof"
    torch.save(Payload(proof), tmp_path / "proof.pth")
    torch.load(tmp_path / "proof.pth", weights_only=False)
    assert proof.exists()


def test_checkpoint_that_does_not_fit_names_missing_and_unexpected_keys(run_cli, tmp_path, image, three_class_state):
    import torch

    state = dict(three_class_state)
    state.pop("layer4.0.conv1.weight")
    state["extra_head.weight"] = torch.zeros(2)
    weights = save_safetensors(state, tmp_path / "odd.safetensors")
    result = explain(run_cli, tmp_path, image, "--weights", weights)
    assert result.code == 2
    (line,) = result.stderr.strip().splitlines()
    assert "missing: layer4.0.conv1.weight" in line
    assert "unexpected: extra_head.weight" in line
    assert "does not fit" in line

    other = run_cli("explain", "-m", "test_convnext", "--json", "-o", tmp_path / "o2", image, "--weights", weights)
    assert other.code == 2 and "missing:" in other.stderr and "unexpected:" in other.stderr


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"shopping list: milk, eggs\n", "(a text file)"),
        (b"\x89PNG\r\n\x1a\n" + bytes(64), "(a PNG image)"),
        (b"", "(an empty file, 0 bytes)"),
        (b"\x80\x02\x8a\x0a" + b"cut short", "(damaged or truncated: EOFError)"),
    ],
    ids=["text", "png", "empty", "truncated-pickle"],
)
def test_a_file_that_is_no_checkpoint_is_named_for_what_it_is(run_cli, tmp_path, image, content, says):
    """torch's own error for a text file is a bare "(101)", the byte it choked on: the line says what the file is."""
    weights = tmp_path / "notes.jpg"
    weights.write_bytes(content)
    result = explain(run_cli, tmp_path, image, "--weights", weights)
    assert result.code == 2
    (line,) = result.stderr.strip().splitlines()
    assert f"--weights {weights}: not a loadable tensor checkpoint {says}; give a .safetensors file" in line, line
    assert "(101)" not in line


def test_a_safetensors_file_under_another_name_is_named(tmp_path, three_class_state):
    from gradcam_cli.errors import ModelError
    from gradcam_cli.model.checkpoint import read_state_dict

    weights = save_safetensors(three_class_state, tmp_path / "model.pth")
    with pytest.raises(ModelError, match="a safetensors file under another name; name it .safetensors"):
        read_state_dict(weights)


def test_a_checkpoint_without_a_state_dict_names_its_top_level_keys(run_cli, tmp_path, image):
    import torch

    weights = tmp_path / "run.pth"
    torch.save({"args": {"lr": 0.1}, "hparams": {"depth": 18}, "step": 100}, weights)
    result = explain(run_cli, tmp_path, image, "--weights", weights)
    assert result.code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.endswith(f"--weights {weights}: holds no state dict of tensors (its top-level keys: args, hparams, step)"), line


DOMAINBED = """
import torch
import torchvision
from torch import nn


class Featurizer(nn.Module):  # DomainBed's ResNet featurizer: torchvision's resnet18 as .network, its fc dropped
    def __init__(self):
        super().__init__()
        self.network = torchvision.models.resnet18(weights=None)
        self.network.fc = nn.Identity()

    def forward(self, x):
        return self.network(x)


class ERM(nn.Module):  # DomainBed's algorithm: the featurizer and classifier, and the Sequential of both
    def __init__(self, classes=3):
        super().__init__()
        self.featurizer = Featurizer()
        self.classifier = nn.Linear(512, classes)
        self.network = nn.Sequential(self.featurizer, self.classifier)


def build():
    return nn.Sequential(Featurizer(), nn.Linear(512, 3))
"""


def test_a_domainbed_checkpoint_loads_from_model_dict(run_cli, tmp_path, image, monkeypatch):
    """DomainBed saves {args, model_input_shape, model_num_classes, model_hparams, model_dict}, the weights under
    `model_dict` three times over (featurizer., classifier., network.): the `network.` prefix fits the model."""
    import torch

    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "domainbed_net.py").write_text(DOMAINBED)
    from domainbed_net import ERM

    torch.manual_seed(7)  # not the weights a fresh build gets: the load is visible
    algorithm = ERM()
    weights = tmp_path / "model.pkl"
    torch.save(
        {
            "args": {"dataset": "PACS", "algorithm": "ERM", "test_envs": [0], "seed": 0},
            "model_input_shape": (3, 224, 224),
            "model_num_classes": 3,
            "model_num_domains": 3,
            "model_hparams": {"lr": 5e-5, "resnet18": True, "resnet_dropout": 0.0},
            "model_dict": algorithm.state_dict(),
        },
        weights,
    )
    result = run_cli("explain", "-m", "domainbed_net.py:build", "--weights", weights, "--json", "-o", tmp_path / "out", image)
    assert result.code == 0, result.stderr
    said = result.stderr.splitlines()
    assert f"gradcam: --weights {weights}: the weights are under 'model_dict' (a training checkpoint's), taken from there" in said
    (prefix,) = [line for line in said if "under 'network.'" in line]
    assert "other tensors left out (classifier, featurizer)" in prefix

    from gradcam_cli.model.load import load_model

    loaded = load_model("domainbed_net.py:build", weights=weights).model.state_dict()
    expected = algorithm.network.state_dict()
    assert loaded.keys() == expected.keys()
    assert all(torch.equal(loaded[key], expected[key]) for key in expected)


def test_debug_shows_the_libraries_own_error_as_the_cause(run_cli, tmp_path, image):
    """Without --debug one line; with it the traceback, down to the error torch or timm raised."""
    from gradcam_cli.errors import ModelError

    weights = tmp_path / "cut.pth"
    weights.write_bytes(b"\x80\x02\x8a\x0a" + b"cut short")
    assert explain(run_cli, tmp_path, image, "--weights", weights).code == 2
    with pytest.raises(ModelError) as raised:
        run_cli("--debug", "explain", "-m", "test_resnet", "-o", tmp_path / "out", image, "--weights", weights)
    assert isinstance(raised.value.__cause__, EOFError)

    with pytest.raises(ModelError) as raised:
        run_cli("--debug", "explain", "-m", "test_resnet", "--no-pretrained", "--model-kwargs", "bogus=1", "-o", tmp_path / "o", image)
    assert isinstance(raised.value.__cause__, TypeError) and "bogus" in str(raised.value.__cause__)


def test_when_timm_cannot_say_where_its_weights_are_it_says_so(monkeypatch):
    """The broad fallback of the timm hub (another timm version's private resolver) fires with one line, not silently;
    a tag timm does not have stays for the build to name, with nothing said here."""
    import warnings

    import timm.models._builder

    from gradcam_cli.errors import Notice
    from gradcam_cli.model.timm_hub import TIMM

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert TIMM.weights_location("resnet50.no_such_tag") is None
        assert TIMM.weights_location("test_resnet") == ("hf", TIMM.weights_location("hf-hub:timm/test_resnet")[1])
    monkeypatch.delattr(timm.models._builder, "_resolve_pretrained_source")  # as in a timm that moved it
    with pytest.warns(Notice, match="test_resnet: this timm does not say where its pretrained weights live") as said:
        assert TIMM.weights_location("test_resnet") is None
    (notice,) = said
    assert "\n" not in str(notice.message)


# ---------------------------------------------------------------- model names


def test_unknown_torchvision_model_suggests(run_cli, tmp_path, image):
    result = run_cli("explain", "-m", "torchvision:resnet5", "--no-pretrained", "-o", tmp_path / "out", image)
    assert result.code == 2
    (line,) = result.stderr.strip().splitlines()
    assert "unknown torchvision model 'resnet5'" in line and "resnet50" in line


# ---------------------------------------------------------------- offline pretrained weights


@pytest.fixture
def no_network(monkeypatch, tmp_path):
    """Fresh empty caches; any HTTP(S) goes to a closed local port and fails at once."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("model", ["resnet18", "torchvision:resnet18"])
def test_pretrained_unavailable_offline_is_one_line_with_next_steps(run_cli, tmp_path, image, no_network, model):
    result = run_cli("explain", "-m", model, "-o", tmp_path / "out", image)
    assert result.code == 2
    assert result.stdout == ""  # stdout carries results only (torch.hub's notice went to stderr)
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("gradcam:")]
    assert "pretrained weights" in line and model in line
    assert "--weights" in line and "cache" in line and "--no-pretrained" in line
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- devices


def test_resolve_device():
    import torch

    from gradcam_cli.errors import UsageError
    from gradcam_cli.model.device import resolve_device

    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(" CPU ") == torch.device("cpu")
    for bad in ("tpu", "cuda:x"):
        with pytest.raises(UsageError):
            resolve_device(bad)
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here; the no-CUDA case cannot be checked")
    assert resolve_device("auto") in (torch.device("cpu"), torch.device("mps"))
    with pytest.raises(UsageError, match="CUDA is not available"):
        resolve_device("cuda")
    with pytest.raises(UsageError, match="CUDA is not available"):
        resolve_device("cuda:1")


def test_device_cuda_without_cuda_is_exit_2(run_cli, tmp_path, image):
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    result = run_cli("explain", "-m", "test_resnet", "--no-pretrained", "--device", "cuda", "-o", tmp_path / "o", image)
    assert result.code == 2 and "CUDA is not available" in result.stderr
