"""Targets beyond one softmax class: a multi-label model's labels above a threshold, and a regression output's value.

The models are the user's own code (`net.py:NAME`), built so that what they
predict follows the image: a dark image and a bright one get different
numbers of labels, so one batch holds images with different numbers of maps.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from conftest import write_image

NET = """
import torch
from torch import nn


class Net(nn.Module):
    # logits = bias + slope * brightness: which labels pass a threshold depends on the image
    def __init__(self, outputs=5, squeeze=False):
        super().__init__()
        torch.manual_seed(0)
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(8, outputs)
        self.squeeze = squeeze
        with torch.no_grad():
            self.features[0].weight.normal_(0, 0.3)
            self.features[0].bias.zero_()
            self.features[2].weight.normal_(0, 0.3)
            self.head.weight.normal_(0, 0.5)

    def forward(self, x):
        out = self.head(self.pool(self.features(x)).flatten(1)) + (x.mean(dim=(1, 2, 3))[:, None] * self.slope()).to(x)
        return out[:, 0] if self.squeeze else out

    def slope(self):
        return torch.linspace(-3, 3, self.head.out_features)


def multilabel():
    return Net()


def regression(outputs=1):
    return Net(outputs=outputs, squeeze=outputs == 1)
"""


@pytest.fixture
def code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """net.py, a dark, a bright and a mid-grey photo; the current folder."""
    from PIL import Image

    (tmp_path / "net.py").write_text(NET)
    photos = tmp_path / "photos"
    photos.mkdir()
    write_image(photos / "mid.png", 96, 80, seed=1)
    rng = np.random.default_rng(2)
    for name, level in (("dark.png", 20), ("bright.png", 235)):
        noise = rng.integers(-15, 16, size=(80, 96, 3))
        Image.fromarray(np.clip(level + noise, 0, 255).astype(np.uint8)).save(photos / name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _sigmoid(value: float) -> float:
    return 1 / (1 + math.exp(-value))


def test_multilabel_explains_each_image_its_own_labels_above_the_threshold(run_cli, code: Path) -> None:
    """Every label whose sigmoid reaches 0.5, in order, one overlay each, and nothing for the others;
    the dark and the bright photo share a batch but not their number of labels."""
    result = run_cli("explain", "photos", "--model", "net.py:multilabel", "--multilabel", "--batch-size", "3", "--json", "-o", "out")
    assert result.code == 0, result.stderr
    records = {Path(r["input"]).name: r for r in result.records()}
    counts = set()
    for record in records.values():
        assert record["target"] == "multilabel"
        labels = [t["class_index"] for t in record["targets"]]
        above = [entry["index"] for entry in record["topk"] if entry["probability"] >= 0.5]  # five outputs: topk has all
        assert labels == above, "exactly the labels above the threshold, likeliest first"
        for target in record["targets"]:
            assert target["probability"] == pytest.approx(_sigmoid(target["score"]), abs=1e-6), "a sigmoid, not a softmax"
            assert Path(target["overlay"]).is_file() and f".class{target['class_index']}.png" in target["overlay"]
        assert sorted(record["outputs"]) == sorted(t["overlay"] for t in record["targets"])
        counts.add(len(labels))
    assert len(counts) > 1, f"the photos should differ in their number of labels, got {counts}"
    assert sum(len(r["targets"]) for r in records.values()) == len(list((code / "out" / "photos").glob("*.png")))


def test_a_higher_threshold_keeps_fewer_labels_and_none_is_said(run_cli, code: Path) -> None:
    loose = run_cli("explain", "photos", "--model", "net.py:multilabel", "--multilabel", "--threshold", "0.2", "--json", "-o", "a")
    strict = run_cli("explain", "photos", "--model", "net.py:multilabel", "--multilabel", "--threshold", "0.9999", "--json", "-o", "b")
    assert loose.code == 0 and strict.code == 0, loose.stderr + strict.stderr
    loose_count = sum(len(r["targets"]) for r in loose.records())
    assert loose_count > len(loose.records()), "a low threshold passes several labels per image"
    for record in strict.records():
        assert record["ok"] and record["targets"] == [] and record["outputs"] == [] and record["class_index"] is None
        assert record["topk"][0]["probability"] < 0.9999
    human = run_cli("explain", "photos/mid.png", "--model", "net.py:multilabel", "--multilabel", "--threshold", "0.9999", "--no-json")
    assert human.code == 0 and "no map  no label above the threshold; the likeliest: " in human.stdout


def test_multilabel_with_named_labels_and_resume(run_cli, code: Path) -> None:
    """--class with --multilabel explains those labels with their sigmoid; --skip-existing skips what was written."""
    named = run_cli("explain", "photos/mid.png", "--model", "net.py:multilabel", "--multilabel", "-c", "4", "-c", "0", "--json", "-o", "n")
    assert named.code == 0, named.stderr
    (record,) = named.records()
    assert [t["class_index"] for t in record["targets"]] == [4, 0]
    assert all(t["probability"] == pytest.approx(_sigmoid(t["score"]), abs=1e-6) for t in record["targets"])
    args = ("explain", "photos", "--model", "net.py:multilabel", "--multilabel", "--threshold", "0.3", "--json", "-o", "r")
    first = run_cli(*args)
    again = run_cli(*args, "--skip-existing")
    written = [r for r in first.records() if r["targets"]]
    assert again.code == 0 and sum(r["skipped"] for r in again.records()) == len(written) > 0


def test_a_regression_output_is_explained_as_its_value(run_cli, code: Path) -> None:
    """(N,) or (N, D) values: the score is the value, no probability, no top classes; another index, another map."""
    one = run_cli("explain", "photos/mid.png", "--model", "net.py:regression", "--output-index", "0", "--caption", "--json", "-o", "one")
    assert one.code == 0, one.stderr
    (record,) = one.records()
    assert record["target"] == "regression" and record["class_index"] == 0 and record["probability"] is None
    assert record["topk"] == [] and not record["blank"] and isinstance(record["score"], float)
    three = ("explain", "photos/mid.png", "--model", "net.py:regression", "--model-kwargs", "outputs=3", "--save-raw", "--json")
    first, last = run_cli(*three, "--output-index", "0", "-o", "i0"), run_cli(*three, "--output-index", "2", "-o", "i2")
    (a,), (b,) = first.records(), last.records()
    assert a["score"] != b["score"] and not np.allclose(np.load(a["targets"][0]["raw"]), np.load(b["targets"][0]["raw"]))
    human = run_cli("explain", "photos/mid.png", "--model", "net.py:regression", "--output-index", "0", "--no-json", "-o", "h")
    assert f"output 0 = {record['score']:.4g}" in human.stdout


def test_the_python_api_takes_the_same_targets(code: Path) -> None:
    import gradcam_cli

    model = gradcam_cli.load_model("net.py:multilabel")
    photo = code / "photos" / "mid.png"
    labelled = gradcam_cli.explain(photo, model, multilabel=True, threshold=0.2)
    assert labelled.targets and all(t.probability >= 0.2 for t in labelled.targets)
    none = gradcam_cli.explain(photo, model, multilabel=True, threshold=0.9999)
    assert none.targets == () and none.map is None and none.class_index is None
    value = gradcam_cli.explain(photo, gradcam_cli.load_model("net.py:regression"), output_index=0)
    assert value.probability is None and value.record.target == "regression"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--threshold", "0.3"), "--threshold picks the labels of a multi-label model: give it with --multilabel"),
        (("--multilabel", "--topk", "2"), "--multilabel explains every label above --threshold"),
        (("--multilabel", "--threshold", "1.5"), "--threshold"),
        (("--output-index", "5"), "--output-index 5 is out of range; the model's output has 5 values (0..4)"),
        (("--output-index", "1", "-c", "2"), "--output-index explains one value of a regression output"),
        (
            (
                "--output-index",
                "-1",
            ),
            "--output-index",
        ),
    ],
)
def test_targets_that_make_no_sense_are_one_line(run_cli, code: Path, args, says) -> None:
    result = run_cli("explain", "photos/mid.png", "--model", "net.py:multilabel", *args, "-o", "bad")
    assert result.code == 2, result.stderr
    assert says in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_the_threshold_default_is_the_one_the_help_says() -> None:
    from gradcam_cli.cams.targets import DEFAULT_THRESHOLD
    from gradcam_cli.option_table import BY_NAME

    assert f"default {DEFAULT_THRESHOLD:g}" in BY_NAME["threshold"].doc and f"default {DEFAULT_THRESHOLD:g}" in BY_NAME["threshold"].help


# ------------------------------------------------------------------ classes by name, as the truth names them


def test_a_class_synonym_names_it_as_in_a_truth_folder(run_cli, tmp_path: Path) -> None:
    """ImageNet's class 281 is "tabby, tabby cat": `--class "tabby cat"` names it, as a folder `val/tabby cat/` does."""
    photo = write_image(tmp_path / "tabby cat" / "photo.png", 64, 48, seed=5)
    for spelling in ("tabby cat", "Tabby_Cat", "tabby"):
        result = run_cli("explain", photo, "-m", "test_resnet", "--no-pretrained", "--class", spelling, "--json", "-o", "out")
        assert result.code == 0, result.stderr
        (record,) = result.records()
        assert (record["class_index"], record["class_name"], record["true_index"]) == (281, "tabby, tabby cat", 281)
    wrong = run_cli("explain", photo, "-m", "test_resnet", "--no-pretrained", "--class", "tabby kat", "-o", "out")
    assert wrong.code == 2 and "is not a class of this model (did you mean 'tabby cat'" in wrong.stderr


def test_truth_rows_that_disagree_on_an_image_are_said_and_the_first_counts(run_cli, tmp_path: Path) -> None:
    write_image(tmp_path / "a.png", 64, 48, seed=6)
    write_image(tmp_path / "b.png", 64, 48, seed=7)
    rows = "path,class\na.png,tabby\nb.png,goldfish\n./a.png,tiger cat\nb.png,Goldfish\nb.png,1\n"
    (tmp_path / "truth.csv").write_text(rows, encoding="utf-8")
    result = run_cli("explain", "a.png", "b.png", "-m", "test_resnet", "--no-pretrained", "--truth", "truth.csv", "--json", "-o", "out")
    assert result.code == 0, result.stderr
    said = [line for line in result.stderr.splitlines() if "disagree" in line]
    assert said == [
        "gradcam: truth.csv: rows disagree on an image's class (./a.png: row 1 says 'tabby, tabby cat', row 3 'tiger cat'); "
        "the first row counts"
    ]
    assert [(r["input"], r["true_index"]) for r in result.records()] == [("a.png", 281), ("b.png", 1)]
