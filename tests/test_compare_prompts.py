"""`gradcam compare` with prompts and references: a CLIP-style model's prompts as the columns (cli/compare_cells.py),
each cell explain()'s map of its prompt at its layer; one prompt or references named in the header; the refusals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from conftest import EXAMPLES, call_cli, require
from gradcam_cli.outputs.grid import COLUMN_LINES, draw_grid, fit_cell, noted_lines
from gradcam_cli.outputs.text import font
from test_compare import TOLERANCE, _ink
from test_prompts import TINY, TINY_ARGS

pytestmark = pytest.mark.usefixtures("one_thread")

SCENES = EXAMPLES / "shapes_segmentation" / "images"
SCENE = SCENES / "scene0_256x192.png"  # the first of the six example scenes: 256 x 192
LONG = "a photo of a small red circle next to a blue triangle on a white background"
PROMPTS = ["a square", LONG, "a triangle"]
ROWS = ["visual.transformer.resblocks.0.ln_1", "visual.transformer.resblocks.1.ln_1"]
MODEL_NAME = "open_clip:ViT-B-32"


@pytest.fixture(scope="module")
def by_prompt(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    """One comparison of the first scene: 2 layers x 3 prompts (one too long for its column) of the tiny CLIP."""
    require("open_clip")
    out = tmp_path_factory.mktemp("by_prompt")
    prompts = [a for p in PROMPTS for a in ("--prompt", p)]
    return call_cli("compare", SCENE, *TINY_ARGS, *prompts, "--layers", ",".join(ROWS), "-o", out, "--json"), out


@pytest.fixture(scope="module")
def clip() -> Any:
    import gradcam_cli

    require("open_clip")
    return gradcam_cli.load_model(MODEL_NAME, pretrained=False, device="cpu", model_kwargs=TINY)


def test_the_prompts_are_the_columns_each_labelled_with_its_similarity(by_prompt) -> None:
    result, out = by_prompt
    assert result.code == 0, result.stderr
    (record,) = result.records()
    assert record["ok"] and record["target"] == "prompt" and record["across"] == "prompts"
    assert record["columns"] == PROMPTS and record["prompts"] == PROMPTS and record["rows"] == ROWS
    assert record["references"] is None and record["probability"] is None
    cells = record["cells"]
    assert [(c["row"], c["col"], c["layer"], c["class_name"], c["class_index"]) for c in cells] == [
        (r, k, layer, prompt, k) for r, layer in enumerate(ROWS) for k, prompt in enumerate(PROMPTS)
    ]
    assert all(c["method"] == "gradcam" for c in cells)
    scores = [c["score"] for c in cells[: len(PROMPTS)]]
    assert [c["score"] for c in cells[len(PROMPTS) :]] == pytest.approx(scores, abs=1e-5)  # the model's score, whatever the layer
    assert record["score"] == scores[0] and len(set(scores)) == len(PROMPTS)
    decimals = 2 if max(abs(s) for s in scores) >= 1 else 3
    notes = [f"sim={s:.{decimals}f}" for s in scores]  # every column with as many decimals
    header = f"gradcam maps of 3 prompts (sim: the model's similarity score)  ·  {MODEL_NAME}"
    photo = np.asarray(Image.open(SCENE).convert("RGB"))
    written = np.asarray(Image.open(record["output"]).convert("RGB"))
    dry = draw_grid(
        photo, [[photo] * 3] * 2, rows=ROWS, columns=PROMPTS, header=header, notes=[f"{h}x{w}" for h, w in record["resolutions"]],
        column_notes=notes,
    )  # fmt: skip
    assert written.shape == dry.picture.shape  # 3 columns of maps and the input's, 2 rows, a label band of 2 lines
    assert [c["box"] for c in cells] == [list(box) for row in dry.cells for box in row]
    top = dry.cells[0][0][1]
    assert np.array_equal(written[:top], dry.picture[:top])  # the header and every column's label, as drawn
    ink = _ink(written)
    for box in dry.column_labels:
        assert ink[box[1] : box[1] + box[3], box[0] : box[0] + box[2]].any()
    assert out in Path(record["output"]).parents and record["output"].endswith("scene0_256x192.png.compare.png")


def test_a_long_prompt_breaks_between_words_and_keeps_its_score_whole() -> None:
    face, width = font(18), 252
    lines = noted_lines(LONG, "sim=-1.04", 18, width, COLUMN_LINES)
    assert len(lines) == 2 and all(face.getlength(line) <= width for line in lines)
    assert lines[0] == "a photo of a small red circle" and LONG.startswith(lines[0])  # broken between words
    assert lines[1].endswith("… · sim=-1.04") and lines[1].startswith("next to a")  # cut with '…' before the score
    assert noted_lines("a square", "sim=0.85", 18, width, COLUMN_LINES) == ["a square · sim=0.85"]  # one line when it fits
    narrow = noted_lines(LONG, "sim=27.31", 18, 90, COLUMN_LINES)  # no room beside the score: it gets the last line whole
    assert narrow[-1] == "sim=27.31" and narrow[0].endswith("…") and len(narrow) == 2


def test_each_cell_is_the_map_explain_gives_for_its_prompt_and_layer(by_prompt, clip) -> None:
    import gradcam_cli

    result, _ = by_prompt
    (record,) = result.records()
    written = np.asarray(Image.open(record["output"]).convert("RGB")).astype(int)
    pictures = []
    for layer in ROWS:
        every = gradcam_cli.explain(SCENE, clip, layers=layer, prompts=PROMPTS)  # `gradcam explain --prompt … --layer L`
        for k, prompt in enumerate(PROMPTS):
            (cell,) = [c for c in record["cells"] if c["layer"] == layer and c["col"] == k]
            target = every.targets[k]
            assert target.prompt == prompt and cell["score"] == pytest.approx(target.similarity, abs=1e-5)
            alone = gradcam_cli.explain(SCENE, clip, layers=layer, prompts=prompt).targets[0]  # `gradcam explain --prompt P`
            np.testing.assert_allclose(alone.map, target.map, atol=1e-5, rtol=0)  # the same map, with the others or alone
            x, y, w, h = cell["box"]
            expected = fit_cell(np.asarray(target.overlay), (w, h)).astype(int)
            assert np.abs(written[y : y + h, x : x + w] - expected).max() <= TOLERANCE, cell
            pictures.append(expected)
    differ = [np.abs(a - b).mean() for i, a in enumerate(pictures) for b in pictures[i + 1 :]]
    assert min(differ) > 1  # any two cells differ: a swapped prompt or layer would fail


def test_one_prompt_keeps_the_methods_as_columns_and_names_the_prompt_in_the_header(tmp_path: Path) -> None:
    require("open_clip")
    result = call_cli(
        "compare", SCENE, *TINY_ARGS, "--prompt", "a square", "--methods", "gradcam,layercam", "--layers", ROWS[1], "-o", tmp_path,
        "--no-json",
    )  # fmt: skip
    assert result.code == 0, result.stderr
    (line,) = result.stdout.splitlines()
    assert '"a square" ' in line and "1x2 (layers x methods)" in line
    (record,) = _records(tmp_path)
    assert record["across"] == "methods" and record["columns"] == ["gradcam", "layercam"] and record["prompts"] == ["a square"]
    header = f'"a square"  sim={record["score"]:.3f}  ·  {MODEL_NAME}'
    _assert_header(record, header)


def test_a_reference_on_an_embedding_model_is_named_with_its_cosine(tmp_path: Path) -> None:
    import gradcam_cli

    reference = SCENES / "scene1_192x256.png"
    model = ("-m", "resnet18", "--no-pretrained", "--model-kwargs", "num_classes=0")
    result = call_cli("compare", SCENE, *model, "--reference", reference, "--layers", "layer4", "-o", tmp_path, "--json")
    assert result.code == 0, result.stderr
    (record,) = result.records()
    assert record["target"] == "reference" and record["references"] == [str(reference)] and record["columns"] == ["gradcam"]
    ready = gradcam_cli.load_model("resnet18", pretrained=False, device="cpu", model_kwargs={"num_classes": 0})
    explained = gradcam_cli.explain(SCENE, ready, layers="layer4", references=reference)
    assert record["score"] == pytest.approx(explained.targets[0].similarity, abs=1e-5) and explained.targets[0].prompt is None
    _assert_header(record, f"like scene1_192x256.png  cos={record['score']:.3f}  ·  resnet18")


def test_zero_shot_labels_compare_as_a_classifier(tmp_path: Path) -> None:
    require("open_clip")
    labels = tmp_path / "labels.txt"
    labels.write_text("square\ncircle\ntriangle\n")
    result = call_cli(
        "compare", SCENE, *TINY_ARGS, "--labels", labels, "--template", "a drawing of a {}", "--layers", ROWS[1],
        "--methods", "gradcam,hirescam", "-o", tmp_path / "o", "--json",
    )  # fmt: skip
    assert result.code == 0, result.stderr
    (record,) = result.records()
    assert record["target"] == "class" and record["class_name"] in {"square", "circle", "triangle"} and 0 < record["probability"] < 1
    assert record["prompts"] is None and record["columns"] == ["gradcam", "hirescam"]
    assert {c["class_name"] for c in record["cells"]} == {record["class_name"]}  # every cell explains the first's class


@pytest.mark.parametrize("args, says", [
    (["--prompt", "a", "--prompt", "b", "--methods", "gradcam,layercam"], "the 2 prompts (--prompt) are the grid's columns, so it "
     "shows one method, not 2: give one in --methods"),
    (["--prompt", "a", "--detection", "0"], "--detection picks one of a detector's detections; --prompt are a CLIP-style model's"),
    (["--prompt", "a", "--prompt", " "], "--prompt: a prompt is empty"),
    (["--prompt", "a", "--class", "0"], "--class picks a classifier's class"),
])  # fmt: skip
def test_refusals_are_one_line_and_exit_2_before_any_grid(tmp_path: Path, args: list[str], says: str) -> None:
    require("open_clip")
    result = call_cli("compare", SCENE, *TINY_ARGS, *args, "-o", tmp_path / "o")
    errors = [line for line in result.stderr.splitlines() if line.startswith("gradcam: error:")]
    assert result.code == 2 and len(errors) == 1 and says in errors[0], result.stderr
    assert result.stdout == "" and not list((tmp_path / "o").rglob("*.png"))


def test_a_prompt_on_a_model_without_a_text_tower_is_refused(tmp_path: Path) -> None:
    result = call_cli("compare", SCENE, "-m", "test_resnet", "--no-pretrained", "--prompt", "a dog", "-o", tmp_path / "o")
    assert result.code == 2 and "--prompt: test_resnet has no text tower" in result.stderr
    assert not list((tmp_path / "o").rglob("*.png"))


def _records(folder: Path) -> list[dict[str, Any]]:
    import json

    return [json.loads(line) for line in (folder / "records.jsonl").read_text().splitlines()]


def _assert_header(record: dict[str, Any], header: str) -> None:
    """The grid's header is `header`: drawn again over its columns, the band above the cells is the same."""
    photo = np.asarray(Image.open(SCENE).convert("RGB"))
    written = np.asarray(Image.open(record["output"]).convert("RGB"))
    rows, columns = record["rows"], record["columns"]
    notes = [f"{size[0]}x{size[1]}" if size else "" for size in record["resolutions"]]
    dry = draw_grid(photo, [[photo] * len(columns)] * len(rows), rows=rows, columns=columns, header=header, notes=notes)
    top = dry.cells[0][0][1]
    assert written.shape == dry.picture.shape and np.array_equal(written[:top], dry.picture[:top])
