"""The report of prompts, reference images and regression outputs: cards whose map explains a score, not a probability.

The runs are real (`gradcam explain ... --report`): a tiny random open_clip
model scored against three prompts, one of them markup; resnet18 without its
head (num_classes=0, an embedding model) against two reference images, one
named with a space and a '#'; the same CLIP given zero-shot labels on class
folders (an ordinary classifier: its confusion matrix); a regression output.
The expected values come from the records the runs wrote, never from
hand-built cards; the page is opened from file:// in headless Chromium.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from browser import launched
from conftest import EXAMPLES, require
from test_prompts import TINY_ARGS
from test_report import read_data

SCENES = EXAMPLES / "shapes_segmentation" / "images"
SHAPES = EXAMPLES / "shapes_images"
PROMPTS = ["a green star", 'a <b>pink</b> "triangle" & <img src=x onerror="window.__pwned=1">', "a dark circle"]
REFERENCES = ["refs/circle two #1.jpg", "refs/star_2.jpg"]  # as the command line names them, from the run's folder
EMBEDDING = ["--model", "resnet18", "--no-pretrained", "--model-kwargs", "num_classes=0"]


def records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "records.jsonl").read_text(encoding="utf-8").splitlines()]


def run(root: Path, *args: Any) -> Path:
    """`gradcam explain ARGS -o out --report` in `root` on one thread (tiny models gain nothing from more); its output folder."""
    import torch

    from test_report_page import cli

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        said = cli(root, "explain", *args, "-o", "out", "--report")
    finally:
        torch.set_num_threads(threads)
    assert "report: out/report/index.html" in said, said
    return root / "out"


@pytest.fixture(scope="module")
def prompts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require("open_clip")
    root = tmp_path_factory.mktemp("prompts")
    (root / "images").mkdir()
    for name in ("scene0_256x192.png", "scene1_192x256.png"):
        shutil.copy(SCENES / name, root / "images" / name)
    return run(root, "images", *TINY_ARGS, *[a for p in PROMPTS for a in ("--prompt", p)])


@pytest.fixture(scope="module")
def references(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("references")
    (root / "images").mkdir()
    (root / "refs").mkdir()
    for name in ("circle_1.jpg", "square_1.jpg"):
        shutil.copy(SHAPES / name, root / "images" / name)
    shutil.copy(SHAPES / "circle_2.jpg", root / REFERENCES[0])
    shutil.copy(SHAPES / "star_2.jpg", root / REFERENCES[1])
    return run(root, "images", *EMBEDDING, *[a for r in REFERENCES for a in ("--reference", r)])


@pytest.fixture(scope="module")
def zero_shot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The CLIP given labels on class folders: circle_1 in circle/, square_1 in square/ (the truth)."""
    require("open_clip")
    root = tmp_path_factory.mktemp("zero_shot")
    for name in ("circle_1.jpg", "square_1.jpg"):
        (root / "val" / name.split("_")[0]).mkdir(parents=True)
        shutil.copy(SHAPES / name, root / "val" / name.split("_")[0] / name)
    (root / "labels.txt").write_text("circle\nsquare\n", encoding="utf-8")
    return run(root, "val", "-r", *TINY_ARGS, "--labels", "labels.txt")


@pytest.fixture(scope="module")
def regression(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("regression")
    return run(root, SHAPES / "circle_1.jpg", SHAPES / "star_1.jpg", "--model", "test_resnet", "--no-pretrained", "--output-index", "1")


# ------------------------------------------------------------------ the data the page gets


def test_a_prompt_card_per_image_and_prompt_with_its_score_and_no_probability(prompts: Path) -> None:
    data, written = read_data(prompts / "report"), records(prompts)
    cards = {(card["input"], card["class_name"]): card for card in data["cards"]}
    assert len(cards) == len(data["cards"]) == 2 * len(PROMPTS)
    for record in written:
        assert record["target"] == "prompt" and [t["class_name"] for t in record["targets"]] == PROMPTS
        best = max(record["targets"], key=lambda target: target["score"])
        ranked = sorted(record["targets"], key=lambda target: -target["score"])
        for target in record["targets"]:
            card = cards[(record["input"], target["class_name"])]
            assert card["target"] == "prompt" and card["kind"] == "image" and card["class_index"] == target["class_index"]
            assert card["score"] == target["score"] and card["probability"] is None
            assert card["correct"] is None and card["predicted"] is None and card["topk"] == []
            assert card["best"] is (target is best)
            assert [(e["name"], e["score"]) for e in card["prompt_scores"]] == [(t["class_name"], t["score"]) for t in ranked]
            assert card["overlay_thumb"] and (prompts / "report" / card["overlay_thumb"]).is_file()
    header = data["header"]
    assert not header["has_truth"] and header["detection"] is None and header["segmentation"] is None
    table = header["scores"]
    assert table["kinds"] == ["prompt"] and table["ranked"]
    rows = {row["class_name"]: row for row in table["rows"]}
    assert set(rows) == set(PROMPTS) and sum(row["best"] for row in rows.values()) == 2  # each image has one best prompt
    for prompt, row in rows.items():
        scores = [c["score"] for c in data["cards"] if c["class_name"] == prompt]
        assert row["images"] == 2 and (row["min"], row["max"]) == (min(scores), max(scores))
        assert row["mean"] == pytest.approx(sum(scores) / 2, abs=1e-6)
    assert [row["best"] for row in table["rows"]] == sorted((row["best"] for row in table["rows"]), reverse=True)


def test_a_reference_card_shows_each_reference_image_linked_where_it_is(references: Path) -> None:
    data, written = read_data(references / "report"), records(references)
    report = references / "report"
    assert len(data["cards"]) == len(written) == 2
    for record, card in zip(written, data["cards"]):
        assert record["target"] == "reference" and record["references"] == REFERENCES
        assert card["target"] == "reference" and card["class_name"] == "circle two #1.jpg + 1 more"
        assert card["score"] == record["targets"][0]["score"] == record["score"] and card["probability"] is None
        assert "best" not in card and "_references" not in card
        assert [r["input"] for r in card["references"]] == REFERENCES
        assert [r["name"] for r in card["references"]] == ["circle two #1.jpg", "star_2.jpg"]
        for given, shown in zip(REFERENCES, card["references"]):
            assert shown["original"] == f"../../{given}"  # relative to the page, plain text (the page encodes it)
            assert (report / shown["original"]).resolve() == (references.parent / given).resolve()
            assert (report / shown["thumb"]).is_file() and shown["thumb_w"] > 0 and shown["thumb_h"] > 0
    assert data["cards"][0]["references"] == data["cards"][1]["references"]  # one thumbnail per picture, shared
    table = data["header"]["scores"]
    assert table["kinds"] == ["reference"] and not table["ranked"]
    assert [(row["class_name"], row["images"]) for row in table["rows"]] == [("circle two #1.jpg + 1 more", 2)]


def test_zero_shot_labels_make_a_classifier_with_its_truth(zero_shot: Path) -> None:
    data = read_data(zero_shot / "report")
    assert {card["target"] for card in data["cards"]} == {"class"} and data["header"]["scores"] is None
    assert data["header"]["has_truth"] and {card["true_class"] for card in data["cards"]} == {"circle", "square"}
    for card in data["cards"]:
        assert 0 <= card["probability"] <= 1 and card["predicted"] in ("circle", "square") and "score" not in card
        assert card["correct"] is (card["predicted"] == card["true_class"])


def test_a_regression_card_says_its_value(regression: Path) -> None:
    data, written = read_data(regression / "report"), records(regression)
    assert data["header"]["scores"]["kinds"] == ["regression"]
    for record, card in zip(written, data["cards"], strict=True):
        assert card["target"] == "regression" and card["class_index"] == 1 and card["score"] == record["score"]
        assert card["probability"] is None and "prompt_scores" not in card


def test_records_with_references_or_a_target_of_the_wrong_type_are_bad_lines(references: Path, tmp_path: Path) -> None:
    from gradcam_cli.report.collect import read_records

    good = records(references)[0]
    bad = [
        {**good, "references": "refs/star_2.jpg"},
        {**good, "references": [3]},
        {**good, "prompts": "a dog"},
        {**good, "target": 5},
        {**good, "score": "high"},
        {**good, "targets": [{**good["targets"][0], "score": "0.9"}]},
    ]
    fine = [{**good, "references": None, "target": "class, negative"}, {**good, "target": "something new"}, good]
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in [*bad, *fine]), encoding="utf-8")
    said: list[str] = []
    assert read_records(path, said.append) == fine
    assert len(said) == 1 and said[0].endswith(f"records.jsonl: {len(bad)} line(s) are not gradcam records; left out"), said


def test_an_evaluations_records_of_one_image_and_several_prompts_are_cards_of_their_own() -> None:
    """eval scores a unit per image and prompt: each is its own card; explain's records of an image stay one."""
    from gradcam_cli.report.collect import merge

    unit = {"input": "a.png", "ok": True, "model": "clip", "method": "gradcam", "baseline": False, "detection": None}
    assert merge([{**unit, "class_index": 0}, {**unit, "class_index": 1}]) == [{**unit, "class_index": 0}, {**unit, "class_index": 1}]
    explained = {key: value for key, value in unit.items() if key != "baseline"}
    assert merge([{**explained, "class_index": 0}, {**explained, "class_index": 1}]) == [{**explained, "class_index": 1}]


# ------------------------------------------------------------------ what the page shows


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from launched()


def opened(browser: Any, out: Path) -> tuple[Any, list[str]]:
    from test_report_page import load_images, open_page

    page, errors = open_page(browser, out / "report" / "index.html")
    load_images(page)
    return page, errors


def closed(page: Any, errors: list[str]) -> None:
    from test_report_page import close

    close(page, errors)


def card_texts(page: Any, selector: str) -> list[dict[str, Any]]:
    """Each card's data attributes and the text of `selector` inside it (None where it has none)."""
    return page.eval_on_selector_all(
        "#cards > .card",
        "(els, sel) => els.map(e => ({...e.dataset, text: e.querySelector(sel) ? e.querySelector(sel).textContent : null,"
        " html: e.querySelector(sel) ? e.querySelector(sel).innerHTML : null}))",
        selector,
    )


@pytest.mark.slow
def test_the_page_shows_each_prompt_and_its_score_filters_by_prompt_and_sorts_by_score(browser: Any, prompts: Path) -> None:
    from test_report_page import ARTIFACTS, matches, shown

    data = read_data(prompts / "report")
    page, errors = opened(browser, prompts)
    assert page.is_visible("#panel-scores") and page.text_content("#scores-title") == "Prompts"
    for hidden in ("#panel-confusion", "#panel-classes", "#ctl-predicted", "#ctl-correct", "#ctl-low", "#notice"):
        assert page.is_hidden(hidden), hidden
    assert page.text_content("#ctl-class-label") == "Prompt" and page.is_visible("#filter-best")
    cards = card_texts(page, ".prompt-text")
    assert len(cards) == len(data["cards"]) and {c["kind"] for c in cards} == {"prompt"}
    by_id = {str(card["id"]): card for card in data["cards"]}
    for shown_card in cards:
        card = by_id[shown_card["id"]]
        assert shown_card["text"] == card["class_name"] == shown_card["class"]  # the prompt as text, its markup never run
        assert float(shown_card["score"]) == card["score"] and shown_card["best"] == ("true" if card["best"] else "false")
    scores = card_texts(page, ".score")
    assert all(float(c["text"]) == pytest.approx(by_id[c["id"]]["score"], rel=1e-3, abs=1e-4) for c in scores)
    assert page.locator("#cards .badge-good").count() == 2 and page.locator("#cards .badge-bad").count() == 0
    assert "%" not in page.text_content("#cards")  # no probability anywhere
    assert page.locator("#cards .prompt-text b, #cards .prompt-text img").count() == 0
    page.select_option("#filter-class", f"={PROMPTS[1]}")
    assert matches(page) == 2 and {c["class"] for c in shown(page)} == {PROMPTS[1]}
    page.click("#reset")
    page.select_option("#filter-best", "true")
    assert {c["id"] for c in shown(page)} == {str(c["id"]) for c in data["cards"] if c["best"]}
    page.click("#reset")
    page.select_option("#sort", "score")
    page.select_option("#sort-dir", "desc")
    assert [float(c["score"]) for c in shown(page)] == sorted((c["score"] for c in data["cards"]), reverse=True)
    best = data["header"]["scores"]["rows"][0]
    page.locator(f'#scores button[data-filter="best"][data-key="={best["class_name"]}"]').click()
    assert page.input_value("#filter-class") == f"={best['class_name']}" and page.input_value("#filter-best") == "true"
    assert matches(page) == best["best"]
    page.click("#reset")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "report-prompts.png"), full_page=True)
    closed(page, errors)


@pytest.mark.slow
def test_the_page_shows_the_reference_images_and_links_them_where_they_are(browser: Any, references: Path) -> None:
    from test_report_page import file_of

    data = read_data(references / "report")
    page, errors = opened(browser, references)
    assert page.is_visible("#panel-scores") and page.text_content("#scores-title") == "References"
    assert page.is_hidden("#panel-confusion") and page.is_hidden("#panel-classes") and page.is_hidden("#ctl-best")
    for card in data["cards"]:
        article = page.locator(f'#cards > .card[data-id="{card["id"]}"]')
        assert article.get_attribute("data-kind") == "reference" and float(article.get_attribute("data-score")) == card["score"]
        assert float(article.locator(".score").text_content()) == pytest.approx(card["score"], abs=5e-4)
        refs = article.locator(".refs .ref")
        assert refs.count() == 2
        for k, given in enumerate(REFERENCES):
            ref = refs.nth(k)
            assert ref.get_attribute("data-name") == Path(given).name
            width = ref.locator("img").evaluate("img => img.complete ? img.naturalWidth : 0")
            assert width == card["references"][k]["thumb_w"] > 0  # the thumbnail loaded
            href = ref.evaluate("a => a.href")  # as the browser resolved it: the '#' and the space encoded once
            assert file_of(href).read_bytes() == (references.parent / given).read_bytes()
    closed(page, errors)


@pytest.mark.slow
def test_zero_shot_labels_get_the_confusion_matrix_and_a_regression_its_value(browser: Any, zero_shot: Path, regression: Path) -> None:
    page, errors = opened(browser, zero_shot)
    assert page.is_visible("#panel-confusion") and page.is_hidden("#panel-scores") and page.is_visible("#panel-classes")
    assert page.locator("#confusion th.row").count() == 2 and page.locator("#cards .card-score").count() == 0
    closed(page, errors)
    data = read_data(regression / "report")
    page, errors = opened(browser, regression)
    assert page.text_content("#scores-title") == "Outputs" and page.is_hidden("#panel-confusion")
    values = card_texts(page, ".score")
    assert {c["kind"] for c in values} == {"regression"}
    assert [float(c["text"]) for c in values] == pytest.approx([c["score"] for c in data["cards"]], rel=1e-3)
    closed(page, errors)
