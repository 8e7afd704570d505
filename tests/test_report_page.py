"""The report page in a real browser: write_page's folder opened from file:// in headless Chromium.

Cards, thumbnails, sorting, filters, the confusion matrix, the first view on
the wrong ones, escaping, and not one console error. The data is built here in
REPORT_SCHEMA's shape (gradcam_cli/report/page.py), with real image files.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from browser import launched
from conftest import ROOT
from gradcam_cli.report.page import write_page

pytestmark = pytest.mark.slow  # a real browser: about 20 s for the file

ARTIFACTS = ROOT / "tests" / "artifacts"
CLASSES = ["cat", "dog", "bird", "fish"]
ODD = '<b>"odd"</b>.jpg'  # its "/" makes a folder '<b>"odd"<' on disk; the card's name is the whole string
UNICODE = "café ☕ #1.jpg"
PROBE = "<img src=x onerror=alert(1)>.jpg"  # a legal file name; unescaped, it would run
THUMB = (128, 96)
SHA = "3f9a" * 16


@dataclass
class Report:
    index: Path
    data: dict[str, Any]

    @property
    def cards(self) -> list[dict[str, Any]]:
        return self.data["cards"]

    def ids(self, keep: Any = lambda c: True) -> set[str]:
        return {str(c["id"]) for c in self.cards if keep(c)}


def picture(rng: np.random.Generator, size: tuple[int, int], heat: bool = False) -> Image.Image:
    """A smooth colour field with a disc; `heat` adds a red-yellow blob like an overlay's."""
    w, h = size
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    base = rng.uniform(60, 200, size=3)
    slope = rng.uniform(-60, 60, size=3)
    rgb = base + slope * (x / w)[..., None]
    cx, cy, r = rng.uniform(0.3, 0.7) * w, rng.uniform(0.3, 0.7) * h, rng.uniform(0.15, 0.3) * min(w, h)
    disc = ((x - cx) ** 2 + (y - cy) ** 2) < r**2
    rgb[disc] = rng.uniform(0, 255, size=3)
    if heat:
        blob = np.exp(-((x - cx) ** 2 + (y - cy) ** 2) / (2 * (1.5 * r) ** 2))[..., None]
        rgb = rgb * (1 - 0.6 * blob) + 0.6 * blob * np.array([240, 90 + 120 * 0.5, 20])
    return Image.fromarray(np.clip(rgb, 0, 255).astype(np.uint8))


def card_for(
    index: int, input_: str, probs: dict[str, float], explained: str, truth: str | None, blank: bool, files: dict[str, str | None]
) -> dict[str, Any]:
    ranked = sorted(probs.items(), key=lambda kv: -kv[1])
    predicted = ranked[0][0]
    return {
        "id": index,
        "input": input_,
        "name": input_.rsplit("/", 1)[-1],
        "ok": True,
        "error": None,
        "class_index": CLASSES.index(explained),
        "class_name": explained,
        "probability": probs[explained],
        "predicted": predicted,
        "predicted_index": CLASSES.index(predicted),
        "margin": ranked[0][1] - ranked[1][1],
        "topk": [{"index": CLASSES.index(n), "name": n, "probability": p} for n, p in ranked[:3]],
        "true_class": truth,
        "correct": None if truth is None else predicted == truth,
        "blank": blank,
        "method": "gradcam",
        "layers": ["layer4"],
        "model": "resnet50",
        "thumb_w": THUMB[0],
        "thumb_h": THUMB[1],
        "metrics": {"deletion_auc": round(0.05 + 0.4 * ((index * 37) % 23) / 23, 4)},
        **files,
    }


def build(root: Path) -> Report:
    """27 cards: 24 labelled images (5 wrong, one blank), one image explained twice, one failed, one unlabelled."""
    rng = np.random.default_rng(11)
    report = root / "report"
    (report / "thumbs").mkdir(parents=True)
    out = root / "out"
    out.mkdir()
    cards: list[dict[str, Any]] = []
    wrong = {3, 7, 10, 17, 21}

    def files_for(card_id: int, input_: str) -> dict[str, str | None]:
        source = root / input_
        source.parent.mkdir(parents=True, exist_ok=True)
        picture(np.random.default_rng(card_id), (320, 240)).save(source, quality=90)
        stem = Path(input_).stem
        picture(np.random.default_rng(card_id), (320, 240), heat=True).save(out / f"{stem}_gradcam.png")
        np.save(out / f"{stem}_gradcam.npy", rng.random((7, 7), dtype=np.float32))
        picture(np.random.default_rng(card_id), THUMB).save(report / "thumbs" / f"{card_id}.jpg", quality=85)
        picture(np.random.default_rng(card_id), THUMB, heat=True).save(report / "thumbs" / f"{card_id}o.jpg", quality=85)
        return {
            "thumb": f"thumbs/{card_id}.jpg",
            "overlay_thumb": f"thumbs/{card_id}o.jpg",
            "original": f"../{input_}",
            "overlay": f"../out/{stem}_gradcam.png",
            "npy": f"../out/{stem}_gradcam.npy",
        }

    for i in range(24):
        truth = CLASSES[i % 4]
        predicted = CLASSES[(i + 1) % 4] if i in wrong else truth
        name = {4: ODD, 9: UNICODE, 13: PROBE}.get(i, f"img_{i:02d}.jpg")
        input_ = f"val/{truth}/{name}"
        top = 0.42 + 0.57 * ((i * 7) % 24) / 24  # 24 distinct values, some below 0.5
        rest = [n for n in CLASSES if n != predicted]
        second = (1 - top) * 0.7
        probs = {predicted: top, rest[0]: second, rest[1]: (1 - top - second) * 0.8, rest[2]: (1 - top - second) * 0.2}
        card = card_for(len(cards), input_, probs, predicted, truth, blank=i == 5, files=files_for(len(cards), input_))
        card["name"] = name
        cards.append(card)
        if i == 0:  # the same image, explained for its second class too
            again = card_for(len(cards), input_, probs, rest[0], truth, blank=False, files=files_for(len(cards), input_))
            cards.append(again)
    cards.append(
        {
            **card_for(len(cards), "val/dog/broken.jpg", {"dog": 1.0, "cat": 0.0}, "dog", "dog", False, {}),
            "ok": False,
            "error": "cannot identify image file 'val/dog/broken.jpg' <truncated>",
            "class_index": None,
            "class_name": None,
            "probability": None,
            "predicted": None,
            "predicted_index": None,
            "margin": None,
            "topk": [],
            "correct": None,
            "metrics": {},
            "thumb": None,
            "overlay_thumb": None,
            "original": "../val/dog/broken.jpg",
            "overlay": None,
            "npy": None,
        }
    )
    probs = {"bird": 0.55, "fish": 0.3, "cat": 0.1, "dog": 0.05}
    cards.append(card_for(len(cards), "extra/unlabelled.jpg", probs, "bird", None, False, files_for(len(cards), "extra/unlabelled.jpg")))
    labelled = [c for c in cards if c["true_class"] is not None and c["ok"]]
    header = {
        "generated": "2026-12-01T15:20:00Z",
        "version": "0.9.0",
        "runs": [
            {
                "command": "gradcam explain val -r --model resnet50 --weights /models/resnet50.pth --truth folder",
                "started": "2026-12-01T15:00:00Z",
                "finished": "2026-12-01T15:10:00Z",
                "interrupted": False,
                "model": "resnet50",
                "weights": "/models/resnet50.pth",
                "weights_sha256": SHA,
                "pretrained": False,
                "method": "gradcam",
                "layers": ["layer4"],
                "version": "0.9.0",
                "device": "cpu",
            }
        ],
        "models": ["resnet50"],
        "methods": ["gradcam"],
        "layers": ["layer4"],
        "counts": {
            "images": len({c["input"] for c in cards}),
            "cards": len(cards),
            "failed": sum(not c["ok"] for c in cards),
            "blank": sum(c["blank"] for c in cards),
            "skipped": 0,
            "with_truth": sum(c["true_class"] is not None for c in cards),
            "correct": sum(c["correct"] is True for c in labelled),
            "wrong": sum(c["correct"] is False for c in labelled),
        },
        "has_truth": True,
        "metrics": ["deletion_auc"],
    }
    data = {"header": header, "cards": cards}
    return Report(write_page(report, data), data)


def many_classes(root: Path, n_classes: int = 60, n_cards: int = 600) -> Report:
    """ImageNet-like: more classes than a matrix can show; no thumbnails (placeholders)."""
    rng = np.random.default_rng(5)
    names = [f"class {k:02d}" for k in range(n_classes)]
    cards = []
    for i in range(n_cards):
        truth = int(rng.integers(n_classes))
        predicted = truth if rng.random() < 0.7 else int(rng.integers(n_classes))
        p = float(rng.uniform(0.2, 0.99))
        cards.append(
            {
                "id": i,
                "input": f"val/{names[truth]}/{i}.jpg",
                "name": f"{i}.jpg",
                "ok": True,
                "error": None,
                "class_index": predicted,
                "class_name": names[predicted],
                "probability": p,
                "predicted": names[predicted],
                "predicted_index": predicted,
                "margin": p / 2,
                "topk": [{"index": predicted, "name": names[predicted], "probability": p}],
                "true_class": names[truth],
                "correct": predicted == truth,
                "blank": False,
                "method": "gradcam",
                "layers": ["layer4"],
                "model": "resnet50",
                "thumb": None,
                "overlay_thumb": None,
                "thumb_w": 64,
                "thumb_h": 64,
                "original": None,
                "overlay": None,
                "npy": None,
                "metrics": {},
            }
        )
    header = {"generated": "2026-12-01T15:20:00Z", "version": "0.9.0", "runs": [], "models": ["resnet50"], "methods": ["gradcam"]}
    header |= {"layers": ["layer4"], "counts": {}, "has_truth": True, "metrics": []}
    data = {"header": header, "cards": cards}
    return Report(write_page(root / "report", data), data)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium for the module; each test opens its own context or shares `opened`."""
    yield from launched()


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Report:
    return build(tmp_path_factory.mktemp("report"))


def open_page(browser: Any, index: Path, width: int = 1280, height: int = 900) -> tuple[Any, list[str]]:
    """A fresh page on the report; the list collects console errors, page errors and any request off file://."""
    context = browser.new_context(viewport={"width": width, "height": height})
    context.set_default_timeout(5_000)
    errors: list[str] = []
    page = context.new_page()
    page.on(
        "console",
        lambda message: errors.append(f"console {message.type}: {message.text}") if message.type in ("error", "warning") else None,
    )
    page.on("pageerror", lambda error: errors.append(f"page error: {error}"))
    page.on("dialog", lambda dialog: (errors.append(f"dialog: {dialog.message}"), dialog.dismiss()))
    page.on("request", lambda request: None if request.url.startswith(("file:", "data:")) else errors.append(f"request: {request.url}"))
    page.on("requestfailed", lambda request: errors.append(f"failed: {request.url} {request.failure}"))
    page.goto(index.as_uri())
    page.wait_for_function("Number(document.body.dataset.renders) >= 1")
    return page, errors


@pytest.fixture
def fresh(browser: Any, report: Report) -> Iterator[Any]:
    """A page just opened on the report."""
    page, errors = open_page(browser, report.index)
    yield page
    page.context.close()
    assert errors == []


@pytest.fixture(scope="module")
def opened(browser: Any, report: Report) -> Iterator[tuple[Any, list[str]]]:
    page, errors = open_page(browser, report.index)
    yield page, errors
    page.context.close()


@pytest.fixture
def page(opened: tuple[Any, list[str]]) -> Iterator[Any]:
    """The module's page (opening one per test costs more than the test), its controls back to their defaults."""
    page, errors = opened
    page.evaluate(
        """() => {
            const set = {"page-size": "120", "sort": "probability", "sort-dir": "desc", "threshold": "0.5"};
            for (const [id, value] of Object.entries(set)) document.getElementById(id).value = value;
            document.getElementById("reset").click();  // clears the filters, renders once
            window.scrollTo(0, 0);
        }"""
    )
    yield page
    seen = errors[:]
    errors.clear()
    assert seen == []


def shown(page: Any) -> list[dict[str, str]]:
    return page.eval_on_selector_all("#cards > .card", "els => els.map(e => Object.assign({}, e.dataset))")


def shown_ids(page: Any) -> set[str]:
    return {c["id"] for c in shown(page)}


def matches(page: Any) -> int:
    return int(page.get_attribute("#match-count", "data-matches"))


LOAD = "src => new Promise(ok => { const i = new Image(); i.onload = () => ok(i.naturalWidth); i.onerror = () => ok(0); i.src = src; })"


def load_images(page: Any) -> None:
    """Scroll every thumbnail into view (they load lazily), wait for them all, come back to the top."""
    page.evaluate(
        """async () => {
            for (const img of document.querySelectorAll('#cards img')) {
                img.scrollIntoView({block: 'center'});
                await new Promise(done => requestAnimationFrame(done));
            }
            await Promise.all([...document.querySelectorAll('#cards img')].map(img => img.decode().catch(() => {})));
            window.scrollTo(0, 0);
        }"""
    )


def show_everything(page: Any) -> None:
    page.click("#reset")
    page.select_option("#page-size", "0")


def test_opens_on_the_wrong_ones_and_says_so(fresh: Any, report: Report) -> None:
    page = fresh
    wrong = report.ids(lambda c: c["correct"] is False)
    assert len(wrong) == 5
    assert page.input_value("#filter-correct") == "wrong"
    assert shown_ids(page) == wrong
    assert all(c["correct"] == "false" for c in shown(page))
    notice = page.locator("#notice")
    assert notice.is_visible() and "wrong" in notice.inner_text()
    assert page.inner_text("#match-count").startswith(f"{len(wrong)} of {len(report.cards)} cards")
    page.click("#show-all")
    assert matches(page) == len(report.cards) and not notice.is_visible()
    assert page.input_value("#filter-correct") == ""


def test_every_card_is_there_across_pages_and_every_image_loads(page: Any, report: Report) -> None:
    page.click("#reset")
    page.select_option("#page-size", "24")
    assert page.get_attribute("#match-count", "data-pages") == "2"
    first = shown_ids(page)
    assert len(first) == 24 and page.is_disabled("#page-prev")
    page.click("#page-next")
    second = shown_ids(page)
    assert page.inner_text("#page-info") == "page 2 of 2" and page.is_disabled("#page-next")
    assert first | second == report.ids() and not first & second
    page.keyboard.press("ArrowLeft")  # keys turn pages too
    assert shown_ids(page) == first

    page.select_option("#page-size", "0")
    assert shown_ids(page) == report.ids()
    with_thumbs = [c for c in report.cards if c["thumb"]]
    images = page.locator("#cards img")
    assert images.count() == 2 * len(with_thumbs)
    for attrs in page.eval_on_selector_all(
        "#cards img", "els => els.map(e => [e.loading, e.getAttribute('width'), e.getAttribute('height')])"
    ):
        assert attrs == ["lazy", str(THUMB[0]), str(THUMB[1])]
    load_images(page)
    assert page.evaluate("[...document.querySelectorAll('#cards img')].every(i => i.naturalWidth > 0)")
    # the full-size links resolve, odd file names included ('#' and quotes are encoded, not cut off)
    for name in (ODD, UNICODE, PROBE):
        input_ = next(c["input"] for c in report.cards if c["name"] == name)
        card = page.locator(f"#cards .card[data-input={json.dumps(input_, ensure_ascii=False)}]")
        for link in ("a.thumb-original", "a.thumb-overlay"):
            href = card.locator(link).evaluate("a => a.href")
            size = page.evaluate(LOAD, href)
            assert size == 320, (name, href)
        assert card.locator("a.npy").count() == 1


def test_the_thumbnail_toggle(page: Any) -> None:
    assert page.locator("#cards .card").first.locator(".thumb-original img, .thumb-overlay img").count() == 2
    page.select_option("#thumbs", "overlay")
    assert page.locator("#cards .thumb-original").first.is_hidden() and page.locator("#cards .thumb-overlay").first.is_visible()
    page.select_option("#thumbs", "original")
    assert page.locator("#cards .thumb-original").first.is_visible() and page.locator("#cards .thumb-overlay").first.is_hidden()
    page.select_option("#thumbs", "both")


def test_sorting(page: Any, report: Report) -> None:
    show_everything(page)
    page.select_option("#sort", "probability")
    page.select_option("#sort-dir", "desc")
    values = [c["probability"] for c in shown(page)]
    numbers = [float(v) for v in values if v]
    assert numbers == sorted(numbers, reverse=True) and values[len(numbers) :] == [""]  # the failed card last
    page.select_option("#sort-dir", "asc")
    values = [c["probability"] for c in shown(page)]
    numbers = [float(v) for v in values if v]
    assert numbers == sorted(numbers) and values[-1] == ""

    def expected(key: Any, reverse: bool) -> list[str]:
        have = [c for c in report.cards if key(c) is not None]
        have.sort(key=lambda c: (-key(c) if reverse else key(c), c["id"]))
        return [str(c["id"]) for c in have] + [str(c["id"]) for c in report.cards if key(c) is None]

    page.select_option("#sort", "margin")
    assert page.input_value("#sort-dir") == "desc"
    assert [c["id"] for c in shown(page)] == expected(lambda c: c["margin"], True)
    page.select_option("#sort", "metric:deletion_auc")
    page.select_option("#sort-dir", "asc")
    assert [c["id"] for c in shown(page)] == expected(lambda c: c["metrics"].get("deletion_auc"), False)
    page.select_option("#sort", "name")
    names = [report.cards[int(c["id"])]["name"].lower() for c in shown(page)]
    plain = [n for n in names if n.startswith("img_")]
    assert names[:2] == [ODD.lower(), PROBE.lower()] and plain == sorted(plain)  # punctuation first, then letters
    page.select_option("#sort", "id")
    assert [c["id"] for c in shown(page)] == [str(c["id"]) for c in report.cards]


@pytest.mark.parametrize(
    ("control", "value", "keep"),
    [
        ("#filter-correct", "wrong", lambda c: c["correct"] is False),
        ("#filter-correct", "correct", lambda c: c["correct"] is True),
        ("#filter-correct", "unknown", lambda c: c["correct"] is None),
        ("#filter-blank", "true", lambda c: c["blank"]),
        ("#filter-blank", "false", lambda c: not c["blank"]),
        ("#filter-failed", "true", lambda c: not c["ok"]),
        ("#filter-failed", "false", lambda c: c["ok"]),
        ("#filter-predicted", "=dog", lambda c: c["predicted"] == "dog"),
        ("#filter-truth", "=cat", lambda c: c["true_class"] == "cat"),
        ("#search", "ODD", lambda c: "odd" in c["name"].lower()),
        ("#search", "CAFÉ", lambda c: c["name"] == UNICODE),
        ("#search", "val/fish/", lambda c: c["input"].startswith("val/fish/")),
        ("#threshold", "0.5", lambda c: c["topk"] and c["topk"][0]["probability"] < 0.5),
        ("#threshold", "0.8", lambda c: c["topk"] and c["topk"][0]["probability"] < 0.8),
    ],
)
def test_filters(page: Any, report: Report, control: str, value: str, keep: Any) -> None:
    show_everything(page)
    if control in ("#search", "#threshold"):
        page.fill(control, value)  # "input": the threshold also ticks #filter-lowconf
    else:
        page.select_option(control, value)
    expected = report.ids(keep)
    assert expected and shown_ids(page) == expected
    assert matches(page) == len(expected)
    assert page.inner_text("#match-count").startswith(f"{len(expected)} of {len(report.cards)} cards")


def test_filters_combine_and_failed_cards_show_their_error(page: Any, report: Report) -> None:
    show_everything(page)
    page.select_option("#filter-truth", "=cat")
    page.select_option("#filter-correct", "wrong")
    assert shown_ids(page) == report.ids(lambda c: c["true_class"] == "cat" and c["correct"] is False)
    page.fill("#search", "zzz")
    assert shown(page) == [] and page.is_visible("#empty")
    page.click("#reset")
    page.select_option("#filter-failed", "true")
    failed = page.locator("#cards .card")
    assert failed.count() == 1 and failed.get_attribute("data-ok") == "false"
    assert failed.locator(".error").text_content() == "cannot identify image file 'val/dog/broken.jpg' <truncated>"
    assert failed.locator(".badge-failed").is_visible() and failed.locator("img").count() == 0


def test_the_confusion_matrix_and_the_class_counts_filter_the_cards(page: Any, report: Report) -> None:
    assert page.is_visible("#confusion table")
    page.click('#confusion button[data-truth="=fish"][data-pred="=cat"]')
    expected = report.ids(lambda c: c["true_class"] == "fish" and c["predicted"] == "cat")
    assert expected and shown_ids(page) == expected
    assert (page.input_value("#filter-truth"), page.input_value("#filter-predicted"), page.input_value("#filter-correct")) == (
        "=fish",
        "=cat",
        "",
    )
    diagonal = page.locator('#confusion button[data-truth="=bird"][data-pred="=bird"]')
    assert diagonal.inner_text() == str(len({c["input"] for c in report.cards if c["true_class"] == c["predicted"] == "bird"}))
    diagonal.click()
    assert shown_ids(page) == report.ids(lambda c: c["true_class"] == c["predicted"] == "bird")
    page.locator("#pairs button").first.click()
    truth, predicted = page.input_value("#filter-truth"), page.input_value("#filter-predicted")
    assert truth != predicted and shown_ids(page) == report.ids(
        lambda c: f"={c['true_class']}" == truth and f"={c['predicted']}" == predicted
    )
    page.click('#classes button[data-filter="predicted"][data-key="=fish"]')
    assert shown_ids(page) == report.ids(lambda c: c["predicted"] == "fish")
    page.click('#classes button[data-filter="wrong"][data-key="=dog"]')
    assert shown_ids(page) == report.ids(lambda c: c["true_class"] == "dog" and c["correct"] is False)
    page.click('#counts button[data-filter="blank"]')
    assert shown_ids(page) == report.ids(lambda c: c["blank"])


def test_strings_from_the_data_are_text_and_the_header_says_what_ran(page: Any, report: Report) -> None:
    page.click("#reset")
    page.fill("#search", "odd")
    card = page.locator("#cards .card")
    assert card.count() == 1
    assert card.get_attribute("data-input") == f"val/cat/{ODD}"
    assert card.locator(".name").text_content() == ODD  # textContent: cards off screen are not rendered (content-visibility)
    assert card.locator(".name b").count() == 0 and page.locator("#cards b:text('odd')").count() == 0
    page.fill("#search", "onerror")
    assert page.locator("#cards .card .name").text_content() == PROBE and page.locator('#cards img[src="x"]').count() == 0
    header = page.inner_text("#summary") + page.inner_text(".top")
    for text in (
        "resnet50",
        SHA,
        "/models/resnet50.pth",
        "gradcam explain val -r --model resnet50",
        "0.9.0",
        "2026-12-01 15:00:00 UTC",
        "layer4",
    ):
        assert text in header, text
    counts = page.inner_text("#counts")
    assert "27\ncards" in counts and "5\nwrong" in counts


def test_a_report_without_truth_opens_on_everything(browser: Any, report: Report) -> None:
    data = json.loads(json.dumps(report.data))
    for card in data["cards"]:
        card["true_class"] = card["correct"] = None
        for key in ("thumb", "overlay_thumb"):
            card[key] = card[key] and f"../report/{card[key]}"
    data["header"]["has_truth"] = False
    data["header"]["counts"] |= {"with_truth": 0, "correct": 0, "wrong": 0}
    index = write_page(report.index.parent.with_name("report-without-truth"), data)  # a sibling: the same relative paths
    page, errors = open_page(browser, index)
    assert matches(page) == len(report.cards) and page.is_hidden("#notice") and page.is_hidden("#panel-confusion")
    assert page.is_hidden("#filter-truth") and {c["correct"] for c in shown(page)} == {""}
    assert page.locator("#cards .badge-good, #cards .badge-bad").count() == 0
    page.context.close()
    assert errors == []


def test_many_classes_fold_into_other(browser: Any, tmp_path: Path) -> None:
    report = many_classes(tmp_path)
    page, errors = open_page(browser, report.index)
    rows = page.eval_on_selector_all("#confusion th.row", "els => els.map(e => e.textContent)")
    assert len(rows) == 21 and rows[-1] == "other"
    shown_classes = {f"={r}" for r in rows[:-1]}
    page.click('#confusion button[data-truth="*other"][data-pred="*other"]')
    page.select_option("#page-size", "0")
    expected = report.ids(lambda c: f"={c['true_class']}" not in shown_classes and f"={c['predicted']}" not in shown_classes)
    assert expected and shown_ids(page) == expected
    assert page.locator("#pairs li").count() == 12
    assert page.locator("#cards .thumb-missing").count() == 2 * len(expected)
    page.context.close()
    assert errors == []


def test_screenshots(browser: Any, report: Report) -> None:
    """tests/artifacts/report.png (1280 px, the whole page as opened) and report-narrow.png (a phone, at the cards): to look at."""
    ARTIFACTS.mkdir(exist_ok=True)
    for width, name in ((1280, "report.png"), (420, "report-narrow.png")):
        page, errors = open_page(browser, report.index, width=width, height=900 if width > 600 else 1400)
        if width < 600:
            page.click("#show-all")
        load_images(page)
        if width < 600:
            page.evaluate("document.getElementById('toolbar').scrollIntoView()")
        page.evaluate("new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")  # a frame after the scroll
        page.screenshot(path=str(ARTIFACTS / name), full_page=width > 600)
        page.context.close()
        assert errors == []


def test_the_report_of_a_real_run_with_a_planted_wrong_class(browser: Any, tmp_path: Path, run_cli: Any) -> None:
    """The shipped example explained in the ImageFolder layout, one truth changed by --truth, the report built by
    `explain --report`: the page opens on that one, every card and picture is there, the matrix cell filters."""
    import shutil

    from conftest import EXAMPLES

    for image in sorted((EXAMPLES / "shapes_images").glob("*.jpg")):
        (tmp_path / "val" / image.name.split("_")[0]).mkdir(parents=True, exist_ok=True)
        shutil.copy(image, tmp_path / "val" / image.name.split("_")[0] / image.name)
    truth = tmp_path / "truth.csv"
    truth.write_text("".join(f"{p.relative_to(tmp_path).as_posix()},{p.parent.name}\n" for p in sorted((tmp_path / "val").rglob("*.jpg"))))
    truth.write_text(truth.read_text().replace("val/star/star_1.jpg,star", "val/star/star_1.jpg,triangle"))
    model = ["--model", "test_resnet", "--weights", EXAMPLES / "shapes_model" / "shapes_test_resnet.safetensors"]
    labels = ["--labels", EXAMPLES / "shapes_model" / "labels.txt"]
    result = run_cli("explain", "val", "-r", *model, *labels, "-o", "out", "--truth", truth, "--report", "--json")
    assert result.code == 0 and "report: out/report/index.html" in result.stderr, result.stderr
    page, errors = open_page(browser, tmp_path / "out" / "report" / "index.html")
    try:
        first = shown(page)
        assert [(c["input"].rsplit("/", 1)[-1], c["correct"], c["truth"]) for c in first] == [("star_1.jpg", "false", "triangle")]
        page.click("#show-all")
        assert len(shown(page)) == 8 and matches(page) == 8
        load_images(page)
        assert page.evaluate("[...document.querySelectorAll('#cards img')].every(i => i.complete && i.naturalWidth > 0)")
        page.select_option("#sort", "probability")
        page.select_option("#sort-dir", "desc")
        probabilities = [float(c["probability"]) for c in shown(page)]
        assert probabilities == sorted(probabilities, reverse=True)
        page.click('#confusion button[data-truth="=square"][data-pred="=square"]')
        assert sorted(c["input"].rsplit("/", 1)[-1] for c in shown(page)) == ["square_1.jpg", "square_2.jpg"]
        page.click('#confusion button[data-truth="=triangle"][data-pred="=star"]')
        assert [c["input"].rsplit("/", 1)[-1] for c in shown(page)] == ["star_1.jpg"]
        page.click("#reset")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "report-run.png"), full_page=False)
    finally:
        page.context.close()
    assert errors == []
