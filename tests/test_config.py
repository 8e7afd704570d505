"""Run presets (`configs/*.yaml`): each loads and explains an image; flags win; bad keys are named.

The presets name real architectures (resnet50, ViT-B/16, Swin-T, ConvNeXt-T);
they run here with random weights (`--no-pretrained`), one small image each.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import ROOT, write_image
from gradcam_cli.cli.presets import load_preset
from gradcam_cli.errors import UsageError

PRESETS = sorted((ROOT / "configs").glob("*.yaml"))


def same_layer(preset_path: str, resolved: str) -> bool:
    """`stages.-1` names `stages.3`: equal step by step, a negative index matching any index."""
    want, got = preset_path.split("."), resolved.split(".")
    return len(want) == len(got) and all(w == g or (w.lstrip("-").isdigit() and w.startswith("-")) for w, g in zip(want, got))


def missing_files(values: dict) -> list[str]:
    return [values[key] for key in ("weights", "labels") if key in values and not Path(values[key]).is_file()]


def test_there_are_presets():
    assert {p.name for p in PRESETS} >= {"resnet50.yaml", "shapes_example.yaml"}


@pytest.mark.parametrize("preset", PRESETS, ids=[p.stem for p in PRESETS])
@pytest.mark.slow
def test_preset_loads_and_explains(run_cli, tmp_path, preset):
    values = load_preset(preset)
    assert values["model"]
    missing = missing_files(values)
    if missing:
        pytest.skip(f"{preset.name} needs {', '.join(missing)}, which does not exist yet (produced by examples/)")
    image = write_image(tmp_path / "in.png", 72, 56, seed=30)
    result = run_cli("explain", "--config", preset, "--no-pretrained", "--json", "-o", tmp_path / "out", image)
    assert result.code == 0, result.stderr
    (record,) = result.records()
    assert record["error"] is None and Path(record["outputs"][0]).is_file()
    assert record["model"] == values["model"]
    if "method" in values:
        assert record["method"] == values["method"]
    if "layers" in values:
        assert len(record["layers"]) == len(values["layers"])
        assert all(same_layer(p, r) for p, r in zip(values["layers"], record["layers"])), record["layers"]
    if "weights" in values:
        assert Path(record["settings"]["weights"]).resolve() == Path(values["weights"]).resolve()
    if "labels" in values:
        names = [n.strip() for n in Path(values["labels"]).read_text(encoding="utf-8").splitlines()]
        assert record["class_name"] in names


@pytest.mark.slow
def test_command_line_flags_win_over_the_preset(run_cli, tmp_path):
    image = write_image(tmp_path / "in.png", 64, 48, seed=31)
    preset = ROOT / "configs" / "resnet50.yaml"
    assert load_preset(preset)["layers"] == ["layer4"]
    result = run_cli(
        "explain",
        "--config",
        preset,
        "--no-pretrained",
        "--json",
        "-o",
        tmp_path / "out",
        "--layer",
        "layer3",
        "--topk",
        "2",
        image,
    )
    assert result.code == 0, result.stderr
    (record,) = result.records()
    assert record["model"] == "resnet50"
    assert record["layers"] == ["layer3"]
    assert len(record["targets"]) == 2


def test_preset_fills_what_the_command_line_left_out(run_cli, tmp_path):
    image = write_image(tmp_path / "in.png", 64, 48, seed=32)
    preset = tmp_path / "tiny.yaml"
    preset.write_text(
        f"model: test_resnet\npretrained: false\nlayers: [layer3]\ntopk: 2\nsave_raw: true\noutput_dir: {tmp_path / 'p'}\n",
        encoding="utf-8",
    )
    result = run_cli("explain", "--config", preset, "--json", image)
    assert result.code == 0, result.stderr
    (record,) = result.records()
    assert record["layers"] == ["layer3"] and len(record["targets"]) == 2
    assert all(Path(t["raw"]).parent == tmp_path / "p" for t in record["targets"])
    override = run_cli(
        "explain", "--config", preset, "--json", "--model", "test_convnext", "--layer", "stages.-1", "-o", tmp_path / "q", image
    )
    assert override.code == 0, override.stderr
    assert override.records()[0]["model"] == "test_convnext"
    assert override.records()[0]["layers"] == ["stages.3"]


def test_preset_weights_are_relative_to_the_preset(tmp_path):
    (tmp_path / "sub").mkdir()
    preset = tmp_path / "sub" / "p.yaml"
    preset.write_text("model: test_resnet\nweights: w.safetensors\nlabels: ../l.txt\n", encoding="utf-8")
    values = load_preset(preset)
    assert Path(values["weights"]) == tmp_path / "sub" / "w.safetensors"
    assert Path(values["labels"]) == tmp_path / "sub" / ".." / "l.txt"


@pytest.mark.parametrize(
    "text, key",
    [
        ("model: test_resnet\nmodle: resnet50\n", "modle"),
        ("model: test_resnet\ntopk: many\n", "topk"),
        ("model: test_resnet\nalpha: [1, 2]\n", "alpha"),
        ("model: test_resnet\ncrop: maybe\n", "crop"),
    ],
    ids=["unknown-key", "bad-int", "bad-float", "bad-bool"],
)
def test_unknown_key_and_bad_value_are_usage_errors(run_cli, tmp_path, text, key):
    preset = tmp_path / "bad.yaml"
    preset.write_text(text, encoding="utf-8")
    with pytest.raises(UsageError, match=f"'{key}'"):
        load_preset(preset)
    image = write_image(tmp_path / "in.png")
    result = run_cli("explain", "--config", preset, "--no-pretrained", "-o", tmp_path / "out", image)
    assert result.code == 2
    (line,) = result.stderr.strip().splitlines()
    assert f"'{key}'" in line and "Traceback" not in line
    if key == "modle":
        assert "did you mean 'model'" in line
    assert not (tmp_path / "out").exists()


def test_not_yaml_and_missing_preset_are_usage_errors(run_cli, tmp_path):
    image = write_image(tmp_path / "in.png")
    broken = tmp_path / "broken.yaml"
    broken.write_text("model: [unclosed\n", encoding="utf-8")
    for preset in (broken, tmp_path / "absent.yaml"):
        result = run_cli("explain", "--config", preset, "-o", tmp_path / "out", image)
        assert result.code == 2 and str(preset) in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1


# ---------------------------------------------------------------- one table, one validation, one path rule


def _readme_preset_keys() -> list[str]:
    from conftest import ROOT

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    listed = re.search(r"<!-- preset-keys:start -->\n`([^`]+)`", readme)
    assert listed, "the README's Run presets section lists the preset keys"
    return [key.strip() for key in listed.group(1).replace("\n", " ").split(",") if key.strip()]


def test_every_preset_key_the_readme_lists_is_accepted(tmp_path):
    from gradcam_cli.option_words import preset_keys

    keys, known = _readme_preset_keys(), preset_keys()
    assert "skip_existing" in keys and set(keys) <= set(known), set(keys) - set(known)
    samples = {bool: "true", int: "1", float: "0.5"}
    for key in keys:
        preset = tmp_path / f"{key}.yaml"
        preset.write_text(f"{key}: {samples.get(known[key].kind, 'value')}\n", encoding="utf-8")
        assert known[key].name in load_preset(preset), key


@pytest.mark.parametrize(
    "option, key, value",
    [("--max-pixels", "max_pixels", -5), ("--topk", "topk", 0), ("--workers", "workers", -1), ("--batch-size", "batch_size", 0)],
)
def test_a_preset_value_is_checked_as_the_flag_is(run_cli, tmp_path, option, key, value):
    """`max_pixels: -5` must not turn the decompression-bomb guard off: the same check and message as the flag."""
    image = write_image(tmp_path / "in.png")
    preset = tmp_path / "p.yaml"
    preset.write_text(f"model: test_resnet\npretrained: false\n{key}: {value}\n", encoding="utf-8")
    from_preset = run_cli("explain", "--config", preset, "-o", tmp_path / "out", image)
    from_flag = run_cli("explain", "-m", "test_resnet", "--no-pretrained", option, str(value), "-o", tmp_path / "out", image)
    for result in (from_preset, from_flag):
        assert result.code == 2, result.stderr
        (line,) = result.stderr.strip().splitlines()
        assert f"{option} (preset key {key}) {value}: must be" in line, line
    assert from_preset.stderr == from_flag.stderr
    assert not (tmp_path / "out").exists()


def test_every_path_key_is_relative_to_the_preset(run_cli, tmp_path):
    (tmp_path / "presets").mkdir()
    preset = tmp_path / "presets" / "p.yaml"
    preset.write_text("model: test_resnet\npretrained: false\noutput_dir: results\nlabels: ~/l.txt\n", encoding="utf-8")
    values = load_preset(preset)
    assert Path(values["output_dir"]) == tmp_path / "presets" / "results"
    assert Path(values["labels"]) == Path("~/l.txt").expanduser()
    preset.write_text("model: test_resnet\npretrained: false\noutput_dir: results\n", encoding="utf-8")
    image = write_image(tmp_path / "in.png")
    result = run_cli("explain", "--config", preset, "--json", image)
    assert result.code == 0, result.stderr
    assert Path(result.records()[0]["outputs"][0]).is_relative_to(tmp_path / "presets" / "results")
