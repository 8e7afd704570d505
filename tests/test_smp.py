"""segmentation_models_pytorch by `smp:ARCH?KEY=VALUE&...`: Unet, FPN and DeepLabV3+ on a random ResNet-18 encoder.

Never pretrained (`--no-pretrained`, or `--weights` from a state dict the
test writes), so no network. smp is the optional `[smp]` extra (in the test
extra, so CI runs these).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conftest import require, write_image

smp = require("segmentation_models_pytorch")
torch = require("torch")
SIZE = ("--input-size", "64")  # the smallest side five halvings leave 2 pixels of
UNET = "smp:Unet?encoder_name=resnet18&classes=3"


@pytest.fixture
def photo(tmp_path: Path) -> Path:
    return write_image(tmp_path / "photo.png", 90, 70)


def _one_line(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.code == 2 and len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize("arch", ["Unet", "FPN", "DeepLabV3Plus"])
def test_each_architecture_segments_on_its_encoders_last_stage(run_cli, photo: Path, tmp_path: Path, arch: str) -> None:
    (tmp_path / "labels.txt").write_text("sky\nroad\ncar\n")
    model = ("--model", f"smp:{arch}?encoder_name=resnet18&classes=3", "--no-pretrained", "--labels", tmp_path / "labels.txt")
    result = run_cli("explain", photo, *model, *SIZE, "--json", "-o", tmp_path / "out")
    assert result.code == 0, result.stderr
    (record,) = result.records()
    assert record["source"] == "smp" and record["target"] == "segment" and record["layers"] == ["encoder.layer4"]
    assert record["segments"] and {s["class_name"] for s in record["segments"]} <= {"sky", "road", "car"}
    (picture,) = record["outputs"]
    assert Path(picture).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Traceback" not in result.stderr


def test_weights_round_trip_and_their_class_count(run_cli, photo: Path, tmp_path: Path) -> None:
    """A state dict loads into the model the name builds; one of another class count rebuilds its head (`classes`)."""
    from safetensors.torch import save_file

    from gradcam_cli import load_model

    torch.manual_seed(1)
    trained = smp.create_model("Unet", encoder_name="resnet18", encoder_weights=None, classes=5).eval()
    save_file(trained.state_dict(), tmp_path / "unet.safetensors")
    loaded = load_model("smp:Unet?encoder_name=resnet18", weights=tmp_path / "unet.safetensors", device="cpu")
    assert loaded.segmenter.classes == 5 and loaded.data_config.input_hw == (256, 256) and loaded.data_config.std == (0.229, 0.224, 0.225)
    state = loaded.model.state_dict()
    assert state.keys() == trained.state_dict().keys() and all(torch.equal(state[k], v) for k, v in trained.state_dict().items())
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        assert torch.allclose(loaded.model(x), trained(x), atol=1e-4)
    result = run_cli("explain", photo, "--model", UNET, "--weights", tmp_path / "unet.safetensors", *SIZE, "--json", "-o", tmp_path / "o")
    assert result.code == 0, result.stderr
    assert result.records()[0]["settings"]["pretrained"] is False and result.records()[0]["segments"]


def test_layers_marks_the_encoders_last_stage_and_compare_takes_its_stages(run_cli, photo: Path, tmp_path: Path) -> None:
    import json

    listed = run_cli("layers", UNET, *SIZE, "--json")
    assert listed.code == 0, listed.stderr
    assert [row["name"] for row in map(json.loads, listed.stdout.splitlines()) if row["default"]] == ["encoder.layer4"]
    from gradcam_cli.model.smp_hub import SMP

    built = smp.create_model("FPN", encoder_name="resnet18", encoder_weights=None, classes=2)
    assert SMP.stage_layers(built, "FPN") == ["encoder.relu", *(f"encoder.layer{i}" for i in range(1, 5))]


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("smp:Unett?encoder_name=resnet18", "unknown segmentation_models_pytorch architecture 'Unett' (did you mean 'Unet'"),
        ("smp:Unet?encoder_name=resnet19", "unknown smp encoder 'resnet19' (did you mean 'resnet18'"),
        ("smp:Unet?encoder_name=resnet18&decoder_chanels=[8,8,8,8,8]", "no argument 'decoder_chanels' (did you mean 'decoder_channels'"),
        ("smp:Unet?encoder_name=resnet18&encoder_depth=9", "encoder_depth"),
        ("smp:Unet?encoder_name=resnet18&classes", "'classes' is not KEY=VALUE"),
        ("smp:Unet?encoder_name=resnet18&activation=sigmoid", "leave activation out"),
    ],
)
def test_bad_names_are_one_line(run_cli, photo: Path, tmp_path: Path, name: str, says: str) -> None:
    line = _one_line(run_cli("explain", photo, "--model", name, "--no-pretrained", *SIZE, "-o", tmp_path / "out"))
    assert says in line and "Traceback" not in line


def test_a_missing_smp_names_the_extra(run_cli, photo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "segmentation_models_pytorch", None)
    line = _one_line(run_cli("explain", photo, "--model", UNET, "--no-pretrained", "-o", tmp_path / "out"))
    assert "pip install 'gradcam-cli[smp]'" in line


def test_the_name_reads_as_model_kwargs_do() -> None:
    from gradcam_cli.model.smp_hub import parse_name

    assert parse_name("Unet?encoder_name=resnet18&classes=3&decoder_channels=[64,32,16,8,4]&encoder_depth=5") == (
        "Unet",
        {"encoder_name": "resnet18", "classes": 3, "decoder_channels": [64, 32, 16, 8, 4], "encoder_depth": 5},
    )
    assert parse_name("FPN") == ("FPN", {})
