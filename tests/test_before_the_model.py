"""What can be checked without the model is checked before it is built.

Building a real model takes seconds, so a fault that needs no model is said
first. The model here is the user's own code, `net.py:build`, which leaves a
file named `built` behind when Python imports it: a fault said before the
model is one that leaves no such file. Nothing is timed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import cli_env, write_image

NET = """
import pathlib

import torch
from torch import nn

pathlib.Path("built").write_text("net.py was imported to build the model")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1))
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.features(x).mean(dim=(2, 3)))


def build(**options):  # ⟨model_kwargs⟩ of any name reach it, as they reach timm's builders
    return Net()
"""

MODEL = ("--model", "net.py:build", "--input-size", "32", "--mean", "0.5", "--std", "0.5")


@pytest.fixture
def here(tmp_path: Path) -> Path:
    """The test's folder (the current one) with net.py and one photo, photo.png."""
    (tmp_path / "net.py").write_text(NET)
    write_image(tmp_path / "photo.png", 40, 32, seed=3)
    return tmp_path


def explain(run_cli, *args, stdin: str = ""):
    return run_cli("explain", *MODEL, "--json", "-o", "out", *args, stdin=stdin)


def built() -> bool:
    return Path("built").exists()


def one_line(result) -> str:
    (line,) = result.stderr.strip().splitlines()
    assert "Traceback" not in result.stderr
    return line


def test_the_marker_model_is_built_by_a_run(run_cli, here):
    """The proof the other tests lean on: a run that gets as far as the model leaves `built` behind."""
    result = explain(run_cli, "photo.png")
    assert result.code == 0, result.stderr
    assert built()


# ------------------------------------------------------------------ inputs


def test_a_text_file_named_jpg_is_said_before_the_model(run_cli, here):
    Path("notes.jpg").write_text("shopping list: milk, eggs\n")
    result = explain(run_cli, "notes.jpg")
    assert result.code == 1
    (record,) = result.records()
    assert record["input"] == "notes.jpg" and record["error"] == "notes.jpg: a text file, not an image"
    assert one_line(result) == "gradcam: notes.jpg: a text file, not an image"
    assert not built() and not Path("out").exists()


def test_a_text_file_beside_an_image_gets_its_record_from_the_run(run_cli, here):
    """The first file that decodes ends the look-ahead: the run reads the rest and gives each its record."""
    Path("notes.jpg").write_text("not an image\n")
    result = explain(run_cli, "notes.jpg", "photo.png")
    assert result.code == 1 and built()
    assert [(r["input"], r["ok"]) for r in result.records()] == [("notes.jpg", False), ("photo.png", True)]


def test_an_empty_folder_gets_a_record_like_a_missing_file_and_an_empty_glob(run_cli, here):
    Path("empty").mkdir()
    alone = explain(run_cli, "empty")
    assert alone.code == 1 and not built()
    assert [(r["input"], r["error"]) for r in alone.records()] == [("empty", "empty: no image file in this folder")]
    folders_only = explain(run_cli, "empt*")  # a pattern that matches only folders matches no file
    assert [(r["input"], r["error"]) for r in folders_only.records()] == [("empt*", "empt*: the pattern matches no file")]
    assert not built()
    with_an_image = explain(run_cli, "empty", "photo.png", "none.jpg", "zz*.png")
    assert with_an_image.code == 1 and built()
    assert [(r["input"], r["ok"]) for r in with_an_image.records()] == [
        ("empty", False),
        ("photo.png", True),
        ("none.jpg", False),
        ("zz*.png", False),
    ]


def test_an_empty_stdin_is_said_before_the_model(run_cli, here):
    result = explain(run_cli, "-", stdin="")
    assert result.code == 1
    assert one_line(result) == "gradcam: -: stdin gave no paths; pipe the paths of images to it, one per line"
    assert not built() and result.stdout == ""


def test_an_empty_stdin_beside_named_inputs_is_said_and_the_rest_run(run_cli, here):
    result = explain(run_cli, "-", "photo.png", stdin="\n  \n")
    assert result.code == 0, result.stderr
    assert "gradcam: -: stdin gave no paths; pipe the paths of images to it, one per line" in result.stderr.splitlines()
    assert [r["input"] for r in result.records()] == ["photo.png"]


def test_stdin_read_ahead_gives_every_line_again(run_cli, here):
    """Blank lines, then the first path (read before the model), then the rest: each path once, line numbers kept."""
    long = "x" * 5000
    result = explain(run_cli, "-", stdin=f"\n\nphoto.png\n{long}\nphoto.png\n")
    assert result.code == 1, result.stderr
    records = result.records()
    assert [r["input"] for r in records] == ["photo.png", "stdin line 4", "photo.png"]
    assert records[1]["error"] == "stdin line 4: longer than the 4,096 bytes a path may have; skipped"


# ------------------------------------------------------------------ the output folder and the truth file


@pytest.mark.parametrize("output", ["notes.txt", "notes.txt/inside"], ids=["a-file", "under-a-file"])
def test_an_output_folder_that_is_a_file_is_said_before_the_model(run_cli, here, output):
    Path("notes.txt").write_text("a file, not a folder\n")
    result = run_cli("explain", *MODEL, "--json", "-o", output, "photo.png")
    assert result.code == 1
    line = one_line(result)
    assert line.startswith(f"gradcam: error: cannot write to the output folder {output}: ") and "is a file, not a folder" in line
    assert line.endswith("choose another --output-dir")
    assert not built() and Path("notes.txt").read_text() == "a file, not a folder\n"


@pytest.mark.parametrize(
    ("rows", "says"),
    [
        ("photo.png,²\n", "--truth truth.csv row 1: '²' is not written in the digits 0-9"),
        ("photo.png,1" + "0" * 5000 + "\n", "--truth truth.csv row 1: a number of 5,001 digits is more than any makes sense"),
        ("photo.png\n", "--truth truth.csv row 1: expected `path,class`"),
    ],
    ids=["superscript", "5000-digits", "one-column"],
)
def test_a_truth_file_that_cannot_be_read_is_said_before_the_model(run_cli, here, rows, says):
    Path("truth.csv").write_text(rows, encoding="utf-8")
    result = explain(run_cli, "--truth", "truth.csv", "photo.png")
    assert result.code == 2 and says in one_line(result), result.stderr
    assert not built()


# ------------------------------------------------------------------ option values


VALUES = {  # id: (the option and its value, what the one line says)
    "size-224x": (("--input-size", "224x"), "--input-size '224x' is not a size like 224"),
    "size-22x": (("--input-size", "22x"), "--input-size '22x' is not a size like 224"),
    "size-huge": (("--input-size", "100000"), "--input-size '100000': 100,000 pixels a side is more than a model takes (at most 8,192)"),
    "size-5000-digits": (("--input-size", "9" * 5000), "a number of 5,000 digits is more than any makes sense"),
    "size-fullwidth": (("--input-size", "２２４"), "'２２４' is not written in the digits 0-9"),
    "mean-nan": (("--mean", "nan"), "--mean 'nan' is not three numbers"),
    "std-inf": (("--std", "inf,1,1"), "--std 'inf,1,1' is not three numbers"),
    "kwargs-nested": (("--model-kwargs", "depth=" + "[" * 100_000), "nests lists or mappings over 32 deep"),
    "kwargs-1e999": (("--model-kwargs", "drop_rate=1e999"), "--model-kwargs 'drop_rate=1e999': 1e999 is not a finite number"),
    "kwargs-nan": (("--model-kwargs", "drop_rate=NaN"), "--model-kwargs 'drop_rate=NaN': NaN is not a finite number"),
    "kwargs-5000-digits": (("--model-kwargs", "seed=" + "7" * 5000), "a number of 5,000 digits is more than any makes sense"),
    "shard-superscript": (("--shard", "²/4"), "--shard '²/4': '²' is not written in the digits 0-9"),
    "shard-5000-digits": (("--shard", "0/" + "4" * 5000), "a number of 5,000 digits is more than any makes sense"),
    "class-superscript": (
        ("--class", "²"),
        "--class '²': '²' is not written in the digits 0-9; give a class index in the digits 0-9, or the class name",
    ),
    "class-arabic-indic": (("--class", "١"), "'١' is not written in the digits 0-9"),
    "class-5000-digits": (("--class", "2" * 5000), "a number of 5,000 digits is more than any makes sense"),
    "method-gradcampp": (("--method", "gradcampp"), "(did you mean 'gradcam++'?)"),
    "method-underscore": (("--method", "guided_gradcam"), "(did you mean 'guided-gradcam'?)"),
}


@pytest.mark.parametrize(("given", "says"), list(VALUES.values()), ids=list(VALUES))
def test_a_value_no_model_could_take_is_one_line_before_the_model(run_cli, here, given, says):
    result = explain(run_cli, *given, "photo.png")
    assert result.code == 2, result.stderr
    line = one_line(result)
    assert says in line and len(line) < 400, line
    assert not built() and not Path("out").exists()


def test_values_near_the_limits_still_run(run_cli, here):
    """The limits refuse what no model takes, not what some do: a 3x32x32 size, kwargs as JSON, an ASCII index."""
    result = run_cli("explain", "--model", "net.py:build", "--input-size", "3, 32, 32", "--mean", "0.5,0.5,0.5", "--std", "0.5",
                     "--class", "2", "--json", "-o", "out", "photo.png")  # fmt: skip
    assert result.code == 0, result.stderr
    assert [r["class_index"] for r in result.records()] == [2]


# ------------------------------------------------------------------ gradcam methods


def test_every_method_has_one_note_and_the_registry_reads_it():
    from gradcam_cli.cams.methods import METHODS
    from gradcam_cli.vocab import METHOD_NOTES, Method

    assert list(METHOD_NOTES) == list(Method)
    for method in Method:
        assert (METHODS[method.value].summary, METHODS[method.value].passes) == (
            METHOD_NOTES[method].summary,
            METHOD_NOTES[method].passes,
        )


@pytest.mark.slow
def test_gradcam_methods_imports_no_torch():
    """`gradcam methods` prints static text: it answers without importing torch or the engine, as --help does."""
    script = (
        "import json, sys\n"
        "from gradcam_cli.cli.app import main\n"
        "try:\n    main(['methods'])\nexcept SystemExit as done:\n    code = done.code\n"
        "print(json.dumps([code, [m for m in ('torch', 'gradcam_cli.cams.methods') if m in sys.modules]]), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], env=cli_env(), capture_output=True, text=True, timeout=120)
    assert json.loads(done.stderr.strip().splitlines()[-1]) == [0, []], done.stderr
    from gradcam_cli.vocab import Method, values

    assert [line.split()[0] for line in done.stdout.splitlines()] == values(Method)
    assert "whole-network, ignores --layer" in done.stdout  # the notes' marks spelled as flags
