"""The report page in a real browser: reports of real `gradcam explain` runs opened from file:// in headless Chromium.

Cards, thumbnails, links, sorting, filters, the confusion matrix, the first
view on the wrong ones, the colour legend, and not one console error. The
runs are hostile on purpose: class names (a --labels file: third-party text,
as a hub's id2label is), the truth, file names, the model's code path, the
weights path and so the command line all carry markup, quotes, entities and a
right-to-left override; a payload that ever ran would set `window.__pwned`.
The expected values come from the data.js the builder wrote, never from
hand-built cards.
"""

from __future__ import annotations

import io
import json
import shutil
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from urllib.request import url2pathname

import numpy as np
import pytest
from PIL import Image

from browser import launched
from conftest import EXAMPLES, ROOT
from test_report import detector_run, read_data
from test_report_segments import segmenter_run

pytestmark = pytest.mark.slow  # a real browser and three real runs: about a minute for the file on 2 cores

ARTIFACTS = ROOT / "tests" / "artifacts"
SHAPES = EXAMPLES / "shapes_images"
WEIGHTS = EXAMPLES / "shapes_model" / "shapes_test_resnet.safetensors"

# the example model's four classes, renamed by the --labels file
CLASSES = [
    '<img src=x onerror="window.__pwned=1">circle',
    "\"square' & <b>bold</b>",
    "</script><script>window.__pwned=3</script>triangle",
    "&amp; star \u202eRTL 🌟",
]
CIRCLE, SQUARE, TRIANGLE, STAR = CLASSES
GHOST = "<u>ghost</u> & 'class'"  # a true class the model does not have
MODEL_FILE = 'm<svg onload="window.__pwned=5">/<b>net</b> "x".py'  # "/" makes folders: the path is the hostile string
MODEL = f"{MODEL_FILE}:build"
WEIGHTS_FILE = "w</script><img src=x onerror=window.__pwned=4> \"q'/w &amp; <i>.safetensors"
ODD = 'val/circle/<b>"odd"</b>.jpg'
PROBE = "val/circle/<img src=x onerror=window.__pwned=7>.jpg"
SPACED = "val/circle/my photo é #1?%20.jpg"  # a space, an accent, '#', '?' and a literal '%20'
BROKEN = "val/square/<svg onload=window.__pwned=8> broken.jpg"  # not a picture: its error names it
NET = "import timm\n\n\ndef build(num_classes=4):\n    return timm.create_model('test_resnet', num_classes=num_classes, pretrained=False)\n"


@dataclass
class Report:
    index: Path
    data: dict[str, Any]
    runs: list[dict[str, Any]]  # runs.jsonl's start lines

    @property
    def cards(self) -> list[dict[str, Any]]:
        return self.data["cards"]

    def ids(self, keep: Any = lambda c: True) -> set[str]:
        return {str(c["id"]) for c in self.cards if keep(c)}


def cli(folder: Path, *args: Any, code: int = 0) -> str:
    """`gradcam ARGS` in this process, run in `folder`; its stderr (fails the test on another exit code than `code`)."""
    from gradcam_cli.cli.app import main
    from gradcam_cli.cli.console import Streams

    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        try:
            main([str(a) for a in args], streams=Streams(io.StringIO(), out, err))
            done = 0
        except SystemExit as exit_:
            done = int(exit_.code or 0)
    assert done == code, err.getvalue()
    return err.getvalue()


def noise(path: Path, seed: int) -> None:
    """A picture of none of the shapes: the model is unsure (top-1 near 0.7) and some classes' maps are blank."""
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.random.default_rng(seed).integers(0, 256, (240, 320, 3), dtype=np.uint8)).save(path)


def hostile_run(root: Path) -> Report:
    """Two runs into one output folder, the report built by the second's --report.

    1: the shapes in class folders plus three oddly named copies and a broken file, two classes explained per image,
    the truth from a CSV (star_1 planted as a triangle, square_2 as a class the model lacks), two noise pictures
    without truth; 2: a third noise picture, its four classes explained (blank maps among them). Both viridis."""
    for image in sorted(SHAPES.glob("*.jpg")):
        (root / "val" / image.name.split("_")[0]).mkdir(parents=True, exist_ok=True)
        shutil.copy(image, root / "val" / image.name.split("_")[0] / image.name)
    for name in (ODD, PROBE, SPACED):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(SHAPES / "circle_1.jpg", root / name)
    (root / BROKEN).write_bytes(b"<html>not a picture</html>")
    for seed, name in enumerate(("extra/noise_0.jpg", "extra/noise_1.jpg", "blank/noise_2.jpg")):
        noise(root / name, seed)
    (root / "labels.txt").write_text("\n".join(CLASSES) + "\n", encoding="utf-8")
    (root / MODEL_FILE).parent.mkdir(parents=True)
    (root / MODEL_FILE).write_text(NET)
    (root / WEIGHTS_FILE).parent.mkdir(parents=True)
    shutil.copy(WEIGHTS, root / WEIGHTS_FILE)
    index = {"circle": "0", "square": "1", "triangle": "2", "star": "3"}  # the CSV names a class by its index
    truth = {path: index[path.split("/")[1]] for path in (p.relative_to(root).as_posix() for p in (root / "val").rglob("*.jpg"))}
    truth |= {"val/star/star_1.jpg": "2", "val/square/square_2.jpg": GHOST}
    rows = "".join(f"{json.dumps(path, ensure_ascii=False)},{json.dumps(cls)}\n" for path, cls in sorted(truth.items()))
    (root / "truth.csv").write_text("path,class\n" + rows, encoding="utf-8")
    model = ["--model", MODEL, "--weights", WEIGHTS_FILE, "--labels", "labels.txt", "--colormap", "viridis", "-o", "out"]
    said = cli(root, "explain", "val", "extra", "-r", *model, "--truth", "truth.csv", "--save-raw", "-k", "2", code=1)
    assert "explained 13 of 14 images, 1 failed, 2 of 11 with a known class wrong" in said, said
    said = cli(root, "explain", "blank/noise_2.jpg", *model, "-k", "4", "--report")
    assert "report: out/report/index.html" in said, said
    runs = [json.loads(line) for line in (root / "out" / "runs.jsonl").read_text().splitlines()[::2]]
    return Report(root / "out" / "report" / "index.html", read_data(root / "out" / "report"), runs)


def plain_run(root: Path) -> Report:
    """The shapes without truth, random weights (--no-pretrained), the default colours, raw values (--norm none)."""
    cli(root, "explain", SHAPES, "--model", "test_resnet", "--no-pretrained", "--norm", "none", "-o", "out", "--report")
    runs = [json.loads(line) for line in (root / "out" / "runs.jsonl").read_text().splitlines()[::2]]
    return Report(root / "out" / "report" / "index.html", read_data(root / "out" / "report"), runs)


def many_classes(root: Path, n_classes: int = 60, n_records: int = 600) -> Report:
    """ImageNet-like, more classes than a matrix can show: records as explain writes them (records.py), no pictures."""
    from gradcam_cli.outputs.records import ImageRecord, TargetRecord
    from gradcam_cli.report.build import build_report

    rng = np.random.default_rng(5)
    names = [f"class {k:02d} <i>&</i>" for k in range(n_classes)]
    lines = []
    for i in range(n_records):
        truth = int(rng.integers(n_classes))
        predicted = truth if rng.random() < 0.7 else int(rng.integers(n_classes))
        p = round(float(rng.uniform(0.2, 0.99)), 6)
        target = TargetRecord(class_index=predicted, class_name=names[predicted], score=1.0, probability=p, blank=False)
        record = ImageRecord(
            input=f"val/{truth}/{i}.jpg", ok=True, model="resnet50", layers=["layer4"], method="gradcam", targets=[target],
            topk=[{"index": predicted, "name": names[predicted], "probability": p}], true_class=names[truth], true_index=truth,
            correct=predicted == truth,
        )  # fmt: skip
        lines.append(record.to_json())
    (root / "out").mkdir()
    (root / "out" / "records.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    index = build_report(root / "out")
    return Report(index, read_data(index.parent), [])


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium for the module; each test opens its own context or shares `opened`."""
    yield from launched()


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Report:
    return hostile_run(tmp_path_factory.mktemp("hostile"))


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Report:
    return plain_run(tmp_path_factory.mktemp("plain"))


@pytest.fixture(scope="module")
def detections(tmp_path_factory: pytest.TempPathFactory) -> Report:
    """A detector's run with truth (test_report.detector_run), its classes named by the hostile labels file."""
    from gradcam_cli.report.build import build_report

    index = build_report(detector_run(tmp_path_factory.mktemp("detections"), CLASSES))
    return Report(index, read_data(index.parent), [])


@pytest.fixture(scope="module")
def segments(tmp_path_factory: pytest.TempPathFactory) -> Report:
    """A segmenter's run with truth masks (test_report_segments.segmenter_run), its classes named by the hostile labels."""
    out = segmenter_run(tmp_path_factory.mktemp("segments"), ["background", CIRCLE, SQUARE, TRIANGLE])
    return Report(out / "report" / "index.html", read_data(out / "report"), [])


def open_page(browser: Any, index: Path, width: int = 1280, height: int = 900) -> tuple[Any, list[str]]:
    """A fresh page on the report; the list collects console errors, page errors, dialogs and any request off file://."""
    context = browser.new_context(viewport={"width": width, "height": height})
    context.set_default_timeout(30_000)  # a guard against a hang on a busy machine, not a measure of speed
    errors: list[str] = []
    page = context.new_page()
    page.on(
        "console",
        lambda message: errors.append(f"console {message.type}: {message.text}") if message.type in ("error", "warning") else None,
    )
    page.on("pageerror", lambda error: errors.append(f"page error: {error}"))
    page.on("dialog", lambda dialog: (errors.append(f"dialog: {dialog.message}"), dialog.dismiss()))
    page.on("request", lambda request: None if request.url.startswith(("file:", "data:")) else errors.append(f"request: {request.url}"))
    page.goto(index.as_uri())
    page.wait_for_function("Number(document.body.dataset.renders) >= 1")
    return page, errors


def close(page: Any, errors: list[str]) -> None:
    """No payload ran (the flag is still unset), nothing went wrong; the page closed."""
    pwned = page.evaluate("window.__pwned")
    page.context.close()
    assert pwned is None and errors == []


@pytest.fixture
def fresh(browser: Any, report: Report) -> Iterator[Any]:
    """A page just opened on the report."""
    page, errors = open_page(browser, report.index)
    yield page
    close(page, errors)


@pytest.fixture(scope="module")
def opened(browser: Any, report: Report) -> Iterator[tuple[Any, list[str]]]:
    page, errors = open_page(browser, report.index)
    yield page, errors
    close(page, errors)


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
    assert seen == [] and page.evaluate("window.__pwned") is None


def shown(page: Any) -> list[dict[str, str]]:
    return page.eval_on_selector_all("#cards > .card", "els => els.map(e => Object.assign({}, e.dataset))")


def shown_ids(page: Any) -> set[str]:
    return {c["id"] for c in shown(page)}


def matches(page: Any) -> int:
    return int(page.get_attribute("#match-count", "data-matches"))


def element(page: Any, selector: str, **data: str) -> Any:
    """The element of `selector` whose data attributes are `data` (hostile values: no CSS selector can be trusted to quote them)."""
    handle = page.evaluate_handle(
        "([sel, want]) => [...document.querySelectorAll(sel)]"
        ".find(e => Object.entries(want).every(([k, v]) => e.dataset[k] === v)) || null",
        [selector, data],
    )
    found = handle.as_element()
    assert found is not None, (selector, data)
    return found


def card_of(page: Any, input_: str) -> Any:
    return element(page, "#cards .card", input=input_)


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


def file_of(href: str) -> Path:
    """The file a file:// URL names, as the browser resolved it."""
    parsed = urlparse(href)
    assert parsed.scheme == "file", href
    return Path(url2pathname(parsed.path))


# ------------------------------------------------------------------ the hostile run's data is what the tests expect


def test_the_hostile_run_has_every_kind_of_card(report: Report) -> None:
    cards = report.cards
    assert len(cards) == 31 and {c["model"] for c in cards} == {MODEL}
    assert {c["class_name"] for c in cards if c["ok"]} == set(CLASSES)
    assert {c["true_class"] for c in cards} == {*CLASSES, GHOST, None}
    assert sum(not c["ok"] for c in cards) == 1 and sum(c["blank"] for c in cards) >= 1
    assert report.ids(lambda c: c["correct"] is False) and report.ids(lambda c: c["topk"] and c["topk"][0]["probability"] < 0.8)
    assert {r["model"] for r in report.data["header"]["runs"]} == {MODEL} and report.runs[0]["weights"] == WEIGHTS_FILE


# ------------------------------------------------------------------ what the page shows and does


def test_opens_on_the_wrong_ones_and_says_so(fresh: Any, report: Report) -> None:
    page = fresh
    wrong = report.ids(lambda c: c["correct"] is False)
    assert {report.cards[int(i)]["input"] for i in wrong} == {"val/star/star_1.jpg", "val/square/square_2.jpg"}
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
    assert len(with_thumbs) == len(report.cards) - 1  # all but the broken file
    assert page.locator("#cards img").count() == 2 * len(with_thumbs)
    for card in with_thumbs:
        attrs = card_of(page, card["input"]).eval_on_selector_all(
            "img", "els => els.map(e => [e.loading, e.getAttribute('width'), e.getAttribute('height')])"
        )
        assert set(map(tuple, attrs)) == {("lazy", str(card["thumb_w"]), str(card["thumb_h"]))}
    load_images(page)
    assert page.evaluate("[...document.querySelectorAll('#cards img')].every(i => i.complete && i.naturalWidth > 0)")


@pytest.mark.parametrize("input_", [SPACED, ODD, PROBE])
def test_links_to_full_size_files_open_the_file_whatever_its_name(page: Any, report: Report, input_: str) -> None:
    """Each link as Chromium resolves it is a file:// URL of the very file (not `my%2520photo`), and loads."""
    show_everything(page)
    root = report.index.parents[2]
    for card in (c for c in report.cards if c["input"] == input_):
        shown_card = element(page, "#cards .card", id=str(card["id"]))
        hrefs = {
            "original": shown_card.eval_on_selector("a.thumb-original", "a => a.href"),
            "overlay": shown_card.eval_on_selector("a.thumb-overlay", "a => a.href"),
            "npy": shown_card.eval_on_selector("a.npy", "a => a.href"),
        }
        assert file_of(hrefs["original"]) == root / input_
        for key, href in hrefs.items():
            assert file_of(href).is_file() and file_of(href).samefile(report.index.parent / card[key]), (key, href)
        for key in ("original", "overlay"):
            assert page.evaluate(LOAD, hrefs[key]) == 320, (key, hrefs[key])


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
    page.select_option("#sort", "name")
    names = [report.cards[int(c["id"])]["name"] for c in shown(page)]
    assert len(names) == len(report.cards)
    in_order = page.evaluate(
        """names => { const c = new Intl.Collator(undefined, {numeric: true, sensitivity: "base"});
                      return names.every((n, k) => k === 0 || c.compare(names[k - 1], n) <= 0); }""",
        names,
    )
    assert in_order, names
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
        ("#filter-predicted", f"={STAR}", lambda c: c["predicted"] == STAR),
        ("#filter-predicted", f"={SQUARE}", lambda c: c["predicted"] == SQUARE),
        ("#filter-truth", f"={CIRCLE}", lambda c: c["true_class"] == CIRCLE),
        ("#filter-truth", f"={GHOST}", lambda c: c["true_class"] == GHOST),
        ("#search", "ODD", lambda c: "odd" in c["input"].lower()),
        ("#search", "onerror=WINDOW.__pwned=7", lambda c: c["input"] == PROBE),
        ("#search", "PHOTO É #1?%20", lambda c: c["input"] == SPACED),
        ("#search", "val/square/", lambda c: c["input"].startswith("val/square/")),
        ("#threshold", "0.7", lambda c: c["topk"] and c["topk"][0]["probability"] < 0.7),  # one noise picture (0.68)
        ("#threshold", "0.98", lambda c: c["topk"] and c["topk"][0]["probability"] < 0.98),  # the noise, two unsure shapes
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


def test_filters_combine_and_a_failed_card_shows_its_error_as_text(page: Any, report: Report) -> None:
    show_everything(page)
    page.select_option("#filter-truth", f"={TRIANGLE}")
    page.select_option("#filter-correct", "wrong")
    assert shown_ids(page) == report.ids(lambda c: c["true_class"] == TRIANGLE and c["correct"] is False)
    page.fill("#search", "zzz")
    assert shown(page) == [] and page.is_visible("#empty")
    page.click("#reset")
    page.select_option("#filter-failed", "true")
    failed = page.locator("#cards .card")
    (broken,) = [c for c in report.cards if not c["ok"]]
    assert failed.count() == 1 and failed.get_attribute("data-ok") == "false"
    assert BROKEN in broken["error"] and failed.locator(".error").text_content() == broken["error"]
    assert failed.locator(".error *").count() == 0
    assert failed.locator(".badge-failed").is_visible() and failed.locator("img").count() == 0


def test_the_confusion_matrix_and_the_class_counts_filter_the_cards(page: Any, report: Report) -> None:
    assert page.is_visible("#confusion table")
    element(page, "#confusion button", truth=f"={TRIANGLE}", pred=f"={STAR}").click()
    assert shown_ids(page) == report.ids(lambda c: c["input"] == "val/star/star_1.jpg")
    assert (page.input_value("#filter-truth"), page.input_value("#filter-predicted"), page.input_value("#filter-correct")) == (
        f"={TRIANGLE}",
        f"={STAR}",
        "",
    )
    diagonal = element(page, "#confusion button", truth=f"={SQUARE}", pred=f"={SQUARE}")
    assert diagonal.inner_text() == "1"  # square_1 (square_2's truth is the ghost class), counted per image
    diagonal.click()
    assert shown_ids(page) == report.ids(lambda c: c["input"] == "val/square/square_1.jpg")
    page.locator("#pairs button").first.click()
    truth, predicted = page.input_value("#filter-truth"), page.input_value("#filter-predicted")
    assert truth != predicted and shown_ids(page) == report.ids(
        lambda c: f"={c['true_class']}" == truth and f"={c['predicted']}" == predicted
    )
    element(page, "#classes button", filter="predicted", key=f"={CIRCLE}").click()
    assert shown_ids(page) == report.ids(lambda c: c["predicted"] == CIRCLE)
    element(page, "#classes button", filter="wrong", key=f"={GHOST}").click()
    assert shown_ids(page) == report.ids(lambda c: c["true_class"] == GHOST)
    page.click('#counts button[data-filter="blank"]')
    assert shown_ids(page) == report.ids(lambda c: c["blank"])


# ------------------------------------------------------------------ hostile text stays text


def test_the_run_header_shows_model_weights_and_command_as_text(page: Any, report: Report) -> None:
    """The run's model (a code path), weights path and command line: each exactly as recorded, no element made of them."""
    (run,) = [r for r in report.runs if "--truth" in r["command"]]
    command = shlex.join(["gradcam", "explain", "val", "extra", "-r"]) + " --model "
    assert run["command"].startswith(command) and WEIGHTS_FILE in shlex.split(run["command"])
    first = page.locator("#runs dl.run").first
    assert first.locator("dt", has_text="model").count() == 1
    said = page.evaluate(
        """() => [...document.querySelectorAll('#runs dl.run')].map(dl => {
            const dd = name => [...dl.querySelectorAll('dt')].find(dt => dt.textContent === name).nextElementSibling;
            return {model: dd('model').querySelector('b').textContent, model_tags: dd('model').querySelectorAll('b *, svg').length,
                    weights: dd('weights').textContent, weights_tags: dd('weights').querySelectorAll('code *').length,
                    command: dd('command').textContent, command_tags: dd('command').querySelectorAll('code *').length};
        })"""
    )
    assert [s["command"] for s in said] == [r["command"] for r in report.runs]
    for entry in said:
        assert (entry["model"], entry["weights"]) == (MODEL, WEIGHTS_FILE)
        assert entry["model_tags"] == entry["weights_tags"] == entry["command_tags"] == 0
    assert page.locator("#subtitle b").first.text_content() == MODEL
    assert page.locator("#runs svg, #runs img, #runs i, #runs script, #subtitle svg, #subtitle b b").count() == 0
    header = page.inner_text("#summary")
    assert run["weights_sha256"] in header and "viridis" in header and run["version"] in header


def test_class_names_and_file_names_are_text_everywhere_they_show(page: Any, report: Report) -> None:
    """Explained class, true class, top-k names, matrix rows and columns, pairs, classes table, select options, file
    names and paths, data attributes: each element's text is the data's string, and it holds no element of its own."""
    show_everything(page)
    cards = {str(c["id"]): c for c in report.cards}
    seen = page.evaluate(
        """() => [...document.querySelectorAll('#cards .card')].map(card => ({
            data: Object.assign({}, card.dataset),
            name: card.querySelector('.name').textContent, path: (card.querySelector('.path') || {}).textContent,
            explained: (card.querySelector('.cls') || {}).textContent, truth: (card.querySelector('.tv') || {}).textContent,
            topk: [...card.querySelectorAll('.topk .tn')].map(e => [e.firstChild.textContent, !!e.querySelector('.tick')]),
            meta: (card.querySelector('.meta bdi') || {}).textContent,
            tags: card.querySelectorAll('.body b b, .body img, .body svg, .body script, .body i, .body u, .cls *, .tv *').length,
        }))"""
    )
    assert len(seen) == len(cards)
    for shown_card in seen:
        card = cards[shown_card["data"]["id"]]
        assert shown_card["data"]["input"] == card["input"] and shown_card["name"] == card["name"]
        assert shown_card["data"]["truth"] == (card["true_class"] or "")
        assert shown_card["data"]["predicted"] == (card["predicted"] or "")
        assert shown_card["data"]["class"] == (card["class_name"] or "")
        assert shown_card["explained"] == card["class_name"] and shown_card["truth"] == card["true_class"]
        assert [text[:-1] if tick else text for text, tick in shown_card["topk"]] == [entry["name"] for entry in card["topk"]]  # " ✓"
        assert shown_card["meta"] == MODEL and shown_card["tags"] == 0
        if "/" in card["input"]:
            assert shown_card["path"] == card["input"][: card["input"].rindex("/") + 1]
    truths = {c["true_class"] for c in report.cards if c["true_class"]}
    predicted = {c["predicted"] for c in report.cards if c["predicted"]}
    confused = {(c["true_class"], c["predicted"]) for c in report.cards if c["correct"] is False}
    assert confused == {(TRIANGLE, STAR), (GHOST, SQUARE)}
    in_matrix = truths | {pred for _, pred in confused}  # the classes with a true image or a wrong prediction
    rows = page.eval_on_selector_all("#confusion th.row", "els => els.map(e => [e.textContent, e.title, e.children.length])")
    assert sorted(rows) == sorted([name, f"true {name}", 0] for name in in_matrix)
    columns = page.eval_on_selector_all(
        "#confusion th.col", "els => els.map(e => [e.textContent, e.title, e.querySelectorAll('span *').length])"
    )
    assert sorted(columns) == sorted([name, f"predicted {name}", 0] for name in in_matrix)
    pairs = page.eval_on_selector_all(
        "#pairs button", "els => els.map(e => [e.querySelector('.pt').textContent, e.querySelector('.pp').textContent])"
    )
    assert sorted(map(tuple, pairs)) == sorted(confused)
    table = page.eval_on_selector_all("#classes td.l", "els => els.map(e => [e.textContent, e.title, e.children.length])")
    assert sorted(table) == sorted([name, name, 0] for name in truths | predicted)
    options = page.eval_on_selector_all("#filter-truth option", "els => els.map(e => [e.value, e.textContent])")
    assert {value for value, _ in options[1:]} == {f"={name}" for name in truths}
    assert all(text.startswith(value[1:] + " (") for value, text in options[1:])
    assert page.locator("#summary img, #summary svg, #summary script, #summary u, #toolbar img, #toolbar u").count() == 0


def test_a_right_to_left_override_in_a_class_name_reverses_that_name_only(page: Any, report: Report) -> None:
    """The star class ends in U+202E: in an isolated element the '#3' and the probability after it stay left to right."""
    show_everything(page)
    card = next(c for c in report.cards if c["class_name"] == STAR)
    line = element(page, "#cards .card", id=str(card["id"]))
    line.scroll_into_view_if_needed()
    boxes = line.eval_on_selector(
        ".line", "l => [l.querySelector('.cls'), l.querySelector('.muted'), l.querySelector('.p')].map(e => e.getBoundingClientRect().left)"
    )
    assert boxes == sorted(boxes) and line.eval_on_selector(".line .muted", "e => e.textContent") == "#3"


def test_the_colour_legend_says_the_runs_colour_map(page: Any, report: Report) -> None:
    """Both runs drew with --colormap viridis: one legend, its gradient viridis's colours from low to high. (Runs that
    differ get a legend each, with their numbers: test_report.py.)"""
    (legend,) = report.data["header"]["legend"]
    assert (legend["colormap"], legend["norm"], legend["runs"]) == ("viridis", "minmax", [])  # every run: no numbers
    assert page.is_visible("#legend") and page.locator("#legend .legend-item").count() == 1
    item = page.locator('#legend .legend-item[data-colormap="viridis"]')
    assert item.locator(".legend-name").text_content() == "viridis"
    assert "each map scaled to its own range" in item.text_content() and "run" not in item.text_content()
    gradient = item.locator(".legend-bar").evaluate("e => getComputedStyle(e).backgroundImage")
    assert gradient.startswith("linear-gradient(to right, rgb(68, 1, 84)") and gradient.endswith("rgb(253, 231, 37))"), gradient
    assert [r["colormap"] for r in report.data["header"]["runs"]] == ["viridis", "viridis"]


# ------------------------------------------------------------------ other reports


def test_a_report_without_truth_with_random_weights_and_raw_values(browser: Any, plain: Report) -> None:
    """Opens on everything, no truth controls; the run's weights read "random weights"; the legend is the default jet and
    says the .npy files hold raw values (--norm none) while the pictures scale each map."""
    page, errors = open_page(browser, plain.index)
    assert matches(page) == len(plain.cards) == 8 and page.is_hidden("#notice") and page.is_hidden("#panel-confusion")
    assert page.is_hidden("#filter-truth") and {c["correct"] for c in shown(page)} == {""}
    assert page.locator("#cards .badge-good, #cards .badge-bad").count() == 0
    weights = page.evaluate(
        "[...document.querySelectorAll('#runs dt')].find(dt => dt.textContent === 'weights').nextElementSibling.textContent"
    )
    assert weights == "random weights"
    item = page.locator('#legend .legend-item[data-colormap="jet"]')
    assert item.is_visible() and "raw values (--norm none)" in item.text_content() and "runs" not in item.text_content()
    gradient = item.locator(".legend-bar").evaluate("e => getComputedStyle(e).backgroundImage")
    assert gradient.startswith("linear-gradient(to right, rgb(0, 0, 128)") and gradient.endswith("rgb(128, 0, 0))"), gradient
    load_images(page)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "report-run.png"), full_page=False)
    close(page, errors)


def test_many_classes_fold_into_other(browser: Any, tmp_path: Path) -> None:
    report = many_classes(tmp_path)
    page, errors = open_page(browser, report.index)
    rows = page.eval_on_selector_all("#confusion th.row", "els => els.map(e => e.textContent)")
    assert len(rows) == 21 and rows[-1] == "other"
    shown_classes = {f"={r}" for r in rows[:-1]}
    assert all(r.endswith(" <i>&</i>") for r in rows[:-1])
    page.click('#confusion button[data-truth="*other"][data-pred="*other"]')
    page.select_option("#page-size", "0")
    expected = report.ids(lambda c: f"={c['true_class']}" not in shown_classes and f"={c['predicted']}" not in shown_classes)
    assert expected and shown_ids(page) == expected
    assert page.locator("#pairs li").count() == 12
    assert page.locator("#cards .thumb-missing").count() == 2 * len(expected)
    assert page.is_hidden("#legend"), "no run says its colours: no legend rather than a guessed one"
    close(page, errors)


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
        close(page, errors)


# ------------------------------------------------------------------ a detector's report


def test_a_detectors_page_has_a_card_per_object_a_table_per_class_and_match_filters(browser: Any, detections: Report) -> None:
    """Opens on the false positives and the missed objects; every object is a card; the table per class replaces the
    matrix and its numbers filter the cards; tp, fp and fn, a class and a minimum score hide the others."""
    page, errors = open_page(browser, detections.index)
    cards = detections.cards

    def judged(*matches: str) -> set[str]:
        return detections.ids(lambda c: c.get("match") in matches)

    assert page.input_value("#filter-match") == "errors" and shown_ids(page) == judged("fp", "fn") and len(judged("fp", "fn")) == 3
    assert "Opened on the 3 errors" in page.inner_text("#notice")
    page.click("#show-all")
    assert matches(page) == len(cards) == 8 and shown_ids(page) == detections.ids()
    kinds = [c.get("kind", "image") for c in shown(page)]  # the failed image's card is a classifier's
    assert (kinds.count("detection"), kinds.count("missed"), kinds.count("empty"), kinds.count("image")) == (4, 2, 1, 1)
    assert page.is_visible("#detections table") and page.is_hidden("#panel-confusion") and page.is_hidden("#panel-classes")
    assert page.is_hidden("#filter-predicted") and page.is_visible("#filter-class") and page.is_visible("#min-score")
    table = detections.data["header"]["detection"]
    rows = page.eval_on_selector_all("#detections tbody tr", "rows => rows.map(r => [...r.cells].slice(0, 5).map(c => c.textContent))")
    assert rows == [[row["class_name"], *(str(row[k]) for k in ("detections", "tp", "fp", "fn"))] for row in table["classes"]]
    total = page.eval_on_selector_all("#detections tfoot td", "cells => cells.map(c => c.textContent)")
    assert total[:7] == ["all classes", "4", "3", "1", "2", "75.0%", "60.0%"]
    assert page.locator("#detections td.l *, #cards .cls *, #filter-class option *").count() == 0, "class names are text"

    for value, keep in [
        ("tp", judged("tp")),
        ("fp", judged("fp")),
        ("fn", judged("fn")),
        ("found", detections.ids(lambda c: c["kind"] == "detection")),
    ]:
        page.select_option("#filter-match", value)
        assert keep and shown_ids(page) == keep, value
        assert {c["match"] for c in shown(page)} == ({"tp", "fp"} if value == "found" else {value})
    page.click("#reset")
    page.select_option("#filter-class", f"={STAR}")
    assert shown_ids(page) == detections.ids(lambda c: c["class_name"] == STAR) and len(shown(page)) == 2
    page.click("#reset")
    page.fill("#min-score", "0.85")
    assert shown_ids(page) == detections.ids(lambda c: (c.get("score") or 0) >= 0.85) and len(shown(page)) == 2
    page.click("#reset")
    element(page, "#detections button", filter="match", match="fn", key=f"={CIRCLE}").click()
    assert shown_ids(page) == detections.ids(lambda c: c["kind"] == "missed" and c["class_name"] == CIRCLE)
    page.click('#counts button[data-match="fp"]')
    assert shown_ids(page) == judged("fp") and page.input_value("#filter-match") == "fp"

    page.click("#reset")
    page.select_option("#sort", "score")
    scores = [c.get("score", "") for c in shown(page)]
    assert scores[:4] == ["0.95", "0.9", "0.8", "0.6"] and set(scores[4:]) == {""}, "missed objects and the rest last"
    circle = element(page, "#cards .card", kind="detection", match="tp", **{"class": CIRCLE})
    links = circle.eval_on_selector_all("a", "els => Object.fromEntries(els.map(a => [a.textContent || a.className, a.href]))")
    assert (
        file_of(links["its map"]).name == "scene0.png.hirescam.det0.png" and file_of(links["every box"]).name == "scene0.png.hirescam.png"
    )
    assert file_of(circle.eval_on_selector("a.thumb-overlay", "a => a.href")) == file_of(links["its map"])
    assert file_of(circle.eval_on_selector("a.thumb-original", "a => a.href")).name == "scene0.png"
    page.select_option("#sort", "id")
    load_images(page)
    assert page.evaluate("[...document.querySelectorAll('#cards img')].every(i => i.complete && i.naturalWidth > 0)")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "report-detections.png"), full_page=True)
    close(page, errors)


# ------------------------------------------------------------------ a segmenter's report


def test_a_segmenters_page_has_a_card_per_region_a_table_per_class_and_an_iou_filter(browser: Any, segments: Report) -> None:
    """Every region is a card, the table per class replaces the matrix and its numbers filter the cards; the IoU
    threshold hides the regions at or above it, the region kind and the class the others."""
    page, errors = open_page(browser, segments.index)
    cards = segments.cards
    assert matches(page) == len(cards) == 11 and shown_ids(page) == segments.ids(), "opens on every card"
    kinds = [(c.get("kind", "image"), c.get("region")) for c in shown(page)]
    assert kinds.count(("segment", "missed")) == 2 and kinds.count(("segment", "")) == 1 and kinds.count(("image", None)) == 1
    assert page.is_visible("#segments table") and page.is_hidden("#panel-confusion") and page.is_hidden("#panel-classes")
    assert page.is_hidden("#panel-detections") and page.is_visible("#filter-region") and page.is_visible("#max-iou")
    table = segments.data["header"]["segmentation"]
    rows = page.eval_on_selector_all("#segments tbody tr", "rows => rows.map(r => [...r.cells].slice(0, 4).map(c => c.textContent))")
    assert rows == [[row["class_name"], *(str(row[k]) for k in ("images", "regions", "missed"))] for row in table["classes"]]
    total = page.eval_on_selector_all("#segments tfoot td", "cells => cells.map(c => c.textContent)")
    assert total[:4] == ["all classes", "4", "7", "2"] and total[7] == f"{table['all']['iou']:.2f}"
    assert page.locator("#segments td.l *, #cards .cls *, #filter-class option *").count() == 0, "class names are text"

    page.fill("#max-iou", "0.8")
    below = segments.ids(lambda c: isinstance(c.get("iou"), float) and c["iou"] < 0.8)
    assert len(below) == 4 and shown_ids(page) == below and all(float(c["iou"]) < 0.8 for c in shown(page))
    page.fill("#max-iou", "")
    assert matches(page) == len(cards)
    page.select_option("#filter-region", "missed")
    assert shown_ids(page) == segments.ids(lambda c: c.get("region") == "missed") and page.is_visible("#cards .badge-bad")
    page.click("#reset")
    page.select_option("#filter-class", f"={TRIANGLE}")
    assert shown_ids(page) == segments.ids(lambda c: c["class_name"] == TRIANGLE) and len(shown(page)) == 4
    page.click("#reset")
    element(page, "#segments button", filter="segment", region="missed", key=f"={TRIANGLE}").click()
    assert shown_ids(page) == segments.ids(lambda c: c.get("region") == "missed" and c["class_name"] == TRIANGLE)
    page.click('#counts button[data-region="explained"]')
    assert shown_ids(page) == segments.ids(lambda c: c.get("region") not in (None, "missed"))

    page.click("#reset")
    page.select_option("#sort", "iou")
    ious = [c.get("iou", "") for c in shown(page)]  # the failed image's card is a classifier's: no data-iou
    assert ious[:9] == sorted(ious[:9], key=float, reverse=True) and set(ious[9:]) == {""}, "no IoU last"
    green = element(page, "#cards .card", region="predicted", **{"class": SQUARE, "iou": "0"})
    links = green.eval_on_selector_all("a", "els => Object.fromEntries(els.map(a => [a.textContent || a.className, a.href]))")
    assert file_of(links["its map"]).name == "s1.png.hirescam.seg1.png" and file_of(links["every region"]).name == "s1.png.hirescam.png"
    assert file_of(green.eval_on_selector("a.thumb-overlay", "a => a.href")) == file_of(links["its map"])
    page.select_option("#sort", "id")
    load_images(page)
    assert page.evaluate("[...document.querySelectorAll('#cards img')].every(i => i.complete && i.naturalWidth > 0)")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "report-segmentation.png"), full_page=True)
    close(page, errors)
