"""The report's video card and volume card, from real `gradcam explain` runs: a video of two shapes crossing in turn
(the explained class changes) and a NIfTI volume explained slice by slice, then `gradcam report`.

A video is one card, not one per frame: its key frames (the first and the last, the most confident, each where the
class changes) cut from its overlay video as JPEG thumbnails, reused while fresh; its class the one most frames have,
its probability its best frame's. A volume is one card: its montage, slice count, intensity scaling, classes over
slices, its NIfTI map linked. Without PyAV the report still builds and the video card says why it has no strip. The
page in headless Chromium shows the strip and plays the overlay video from file://.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from conftest import EXAMPLE_MODEL, EXAMPLES, CliResult, call_cli, require
from test_report import read_data

sys.path.insert(0, str(EXAMPLES))
from shapes import make_moving_scene  # noqa: E402

av = require("av")
require("nibabel")
from test_video import write_video  # noqa: E402
from test_volume_slices import shape_volume  # noqa: E402

RATE = 12
HALF = 8  # frames of each shape: a star crosses, then a circle


@dataclass
class Built:
    root: Path  # where the runs ran (their relative paths start here)
    out: Path
    records: list[dict[str, Any]]  # records.jsonl as explain wrote it
    data: dict[str, Any]  # data.js as the page reads it

    def cards(self, kind: str) -> list[dict[str, Any]]:
        return [card for card in self.data["cards"] if card["kind"] == kind]

    def frames(self) -> list[dict[str, Any]]:
        return sorted((r for r in self.records if r.get("frame") is not None), key=lambda r: r["frame"])


def two_shapes(path: Path) -> None:
    """A video whose first half shows a star crossing, its second half a circle: the top class changes once."""
    star, _, _ = make_moving_scene(np.random.default_rng(5), 192, 144, HALF, cls=3)
    circle, _, _ = make_moving_scene(np.random.default_rng(6), 192, 144, HALF, cls=0)
    write_video(path, [np.asarray(image) for image in star + circle], rate=RATE)


def run_in(folder: Path, *args: Any) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        result = call_cli(*args)
    assert result.code == 0, result.stderr


def build(root: Path) -> Built:
    """The two runs into one output folder, then `gradcam report` of it."""
    two_shapes(root / "clips" / "two shapes.mp4")
    shape_volume(root / "scan.nii.gz")
    run_in(root, "explain", "clips/two shapes.mp4", *EXAMPLE_MODEL, "-o", "out")
    run_in(root, "explain", "scan.nii.gz", *EXAMPLE_MODEL, "--slices", "axial", "-o", "out")
    run_in(root, "report", "out")
    import json

    records = [json.loads(line) for line in (root / "out" / "records.jsonl").read_text().splitlines() if line.strip()]
    return Built(root, root / "out", records, read_data(root / "out" / "report"))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return build(tmp_path_factory.mktemp("videos"))


def expected_key_frames(frames: list[dict[str, Any]]) -> list[int]:
    """The spec, said again from the records: first, last, most confident, each class change (few enough: no thinning)."""
    best = max(range(len(frames)), key=lambda n: frames[n]["probability"])
    changes = [n for n in range(1, len(frames)) if frames[n]["class_index"] != frames[n - 1]["class_index"]]
    return sorted({0, len(frames) - 1, best, *changes})


def test_a_video_is_one_card_and_its_strip_is_its_key_frames(built: Built) -> None:
    frames = built.frames()
    assert len(frames) == 2 * HALF
    assert [r["class_index"] for r in frames[HALF - 2 : HALF + 2]] == [3, 3, 0, 0]  # the model sees the star, then the circle
    (card,) = built.cards("video")
    assert len(built.data["cards"]) == 2 and card["input"] == "clips/two shapes.mp4" and card["count"] == 2 * HALF
    positions = expected_key_frames(frames)
    assert 4 <= len(positions) <= 8
    assert [k["position"] for k in card["strip"]] == positions
    for key, n in zip(card["strip"], positions):
        record = frames[n]
        assert (key["frame"], key["class_index"], key["probability"]) == (record["frame"], record["class_index"], record["probability"])
        assert key["time"] == pytest.approx(n / RATE, abs=1e-3)
        assert key["change"] == (n > 0 and frames[n]["class_index"] != frames[n - 1]["class_index"])
    assert [k["best"] for k in card["strip"]].count(True) == 1
    most = Counter(r["class_index"] for r in frames).most_common(1)[0][0]
    assert card["class_index"] == most and card["probability"] == max(r["probability"] for r in frames)
    assert [c["count"] for c in card["classes"]] == sorted(Counter(r["class_index"] for r in frames).values(), reverse=True)
    counts = built.data["header"]["counts"]
    assert (counts["images"], counts["videos"], counts["frames"], counts["volumes"], counts["slices"]) == (2, 1, 16, 1, 4)


def test_the_key_frames_thumbnails_are_the_overlay_videos_frames(built: Built) -> None:
    (card,) = built.cards("video")
    report = built.out / "report"
    video = (report / card["overlay"]).resolve()
    assert video == (built.root / "out" / "clips" / "two shapes.mp4.gradcam.mp4").resolve()
    assert (report / card["original"]).resolve() == (built.root / "clips" / "two shapes.mp4").resolve()
    with av.open(str(video)) as container:
        decoded = [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]
    for key in card["strip"]:
        with Image.open(report / key["thumb"]) as thumb:
            assert thumb.format == "JPEG" and thumb.size == (key["thumb_w"], key["thumb_h"]) == (192, 144)
            pixels = np.asarray(thumb.convert("RGB"), np.float32)
        others = [float(np.abs(pixels - frame).mean()) for frame in decoded]
        assert int(np.argmin(others)) == key["position"] or others[key["position"]] < 4.0  # its own frame, as JPEG keeps it


def test_a_volume_is_one_card_with_its_montage_and_its_nifti_map(built: Built) -> None:
    (card,) = built.cards("volume")
    slices = [r for r in built.records if r.get("slice") is not None]
    assert card["input"] == "scan.nii.gz" and card["count"] == len(slices) == 4
    assert card["intensity"] == slices[0]["intensity"] and card["intensity"].startswith("percentiles 0.5-99.5")
    assert sum(c["count"] for c in card["classes"]) == 4
    assert card["class_index"] == Counter(r["class_index"] for r in slices).most_common(1)[0][0]
    report = built.out / "report"
    assert (report / card["overlay"]).resolve() == (built.out / "scan.nii.gz.gradcam.png").resolve()
    assert (report / card["nifti"]).resolve() == (built.out / "scan.nii.gz.gradcam.nii.gz").resolve()
    with Image.open(report / card["overlay_thumb"]) as thumb:
        assert thumb.format == "JPEG" and max(thumb.size) == 256


def test_a_second_build_reuses_the_fresh_thumbnails(built: Built) -> None:
    thumbs = sorted((built.out / "report" / "thumbs").glob("*.jpg"))
    before = {path: path.stat().st_mtime_ns for path in thumbs}
    run_in(built.root, "report", "out")
    assert {path: path.stat().st_mtime_ns for path in thumbs} == before
    assert read_data(built.out / "report")["cards"][0]["strip"] == built.cards("video")[0]["strip"]


def test_without_pyav_the_report_builds_and_the_card_says_why_it_has_no_strip(built: Built, tmp_path: Path) -> None:
    root = tmp_path / "copy"
    result = without_pyav(built, root)
    assert result.code == 0, result.stderr
    assert "PyAV is not installed" in result.stderr
    data = read_data(root / "out" / "report")
    (card,) = [c for c in data["cards"] if c["kind"] == "video"]
    assert card["strip"] == [] and "PyAV is not installed" in card["strip_note"]
    assert card["overlay"] is not None and card["count"] == 2 * HALF  # still one card, the video still linked


def without_pyav(built: Built, root: Path) -> CliResult:
    """The runs' folder copied without its report, then `gradcam report` of it as if PyAV were not installed."""
    shutil.copytree(built.root, root, ignore=shutil.ignore_patterns("report"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sys.modules, "av", None)  # `import av` raises ImportError, as without PyAV
        patch.chdir(root)
        return call_cli("report", "out")


def test_records_with_frames_and_slices_are_records_and_bad_ones_are_not() -> None:
    from gradcam_cli.report.check import is_record
    from gradcam_cli.report.collect import merge

    frame = {"input": "v.mp4", "ok": True, "frame": 3, "time": 0.25, "clip": 0}
    assert is_record(frame) and is_record({"input": "s.nii", "ok": True, "slice": 2, "intensity": "window 40,400"})
    for bad in ({"frame": "3"}, {"time": "x"}, {"clip": 1.5}, {"slice": True}, {"intensity": 3}):
        assert not is_record({"input": "v.mp4", "ok": True, **bad})
    assert len(merge([frame, {**frame, "frame": 4}, frame])) == 2  # frames are not one input's records


def test_key_frames_are_thinned_evenly_keeping_the_first_last_and_best() -> None:
    from gradcam_cli.report.videos import key_frames

    classes = [k // 2 for k in range(30)]  # the class changes every other frame: 14 changes
    frames = [{"frame": k, "class_index": c, "probability": 0.5 + (0.4 if k == 17 else 0)} for k, c in enumerate(classes)]
    chosen = key_frames(frames)
    assert len(chosen) == 8 and {0, 17, 29} <= set(chosen)
    changes = [n for n in chosen if n not in (0, 17, 29)]
    assert changes[0] == 2 and changes[-1] == 28 and all(b - a >= 4 for a, b in zip(changes, changes[1:]))
    assert key_frames(frames[:1]) == [0] and key_frames([]) == []


# ------------------------------------------------------------------------------------------------- in a browser


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from browser import launched

    yield from launched()


@pytest.mark.slow
def test_the_page_shows_the_video_card_its_strip_and_plays_the_overlay_video(browser: Any, built: Built) -> None:
    from test_report_page import close, open_page

    page, errors = open_page(browser, built.out / "report" / "index.html")
    (card,) = built.cards("video")
    video_card = page.locator("#cards article.card-video")
    assert video_card.count() == 1 and video_card.get_attribute("data-frames") == "16"
    keys = video_card.locator(".strip figure.key")
    assert keys.count() == len(card["strip"])
    assert [keys.nth(n).get_attribute("data-frame") for n in range(keys.count())] == [str(k["frame"]) for k in card["strip"]]
    widths = page.evaluate(
        """async () => Promise.all([...document.querySelectorAll('.strip img')].map(async i => {
            i.scrollIntoView(); await i.decode().catch(() => {}); return i.naturalWidth; }))"""
    )
    assert widths == [192] * len(card["strip"])
    caption = keys.nth(0).locator("figcaption").inner_text()
    assert caption.startswith("0.00 s · ") and card["strip"][0]["class_name"] in caption
    metadata = page.evaluate(
        """() => new Promise(done => { const v = document.querySelector('article.card-video video');
            const say = () => done({src: v.currentSrc, duration: v.duration, width: v.videoWidth});
            if (v.readyState >= 1) say();
            else { v.addEventListener('loadedmetadata', say);
                   v.addEventListener('error', () => done({error: v.error && v.error.code})); } })"""
    )
    assert metadata.get("width") == 192 and metadata["duration"] == pytest.approx(2 * HALF / RATE, abs=0.1), metadata
    assert metadata["src"].startswith("file://") and metadata["src"].endswith("two%20shapes.mp4.gradcam.mp4")
    played = page.evaluate(
        """async () => { const v = document.querySelector('article.card-video video'); await v.play();
            await new Promise(done => { const t = () => v.currentTime > 0.2 ? done() : setTimeout(t, 20); t(); });
            v.pause(); return v.currentTime; }"""
    )
    assert played > 0.2  # it plays in place, from file://
    volume = page.locator("#cards article.card-volume")
    assert volume.count() == 1 and volume.get_attribute("data-slices") == "4"
    assert volume.locator("a.nifti").get_attribute("href").endswith("scan.nii.gz.gradcam.nii.gz")
    counted = page.evaluate("() => [...document.querySelectorAll('#classes button[data-filter=predicted]')].map(b => b.textContent)")
    assert counted == ["1", "1"]  # the video's top class and the volume's, each counted once, not once per frame or slice
    assert "a video or volume once" in page.locator("#classes").inner_text()
    page.select_option("#filter-predicted", f"={card['predicted']}")  # the filters keep working on a video card
    assert page.locator("#cards article.card").count() == 1 and page.locator("#cards article.card-video").count() == 1
    if os.environ.get("GRADCAM_SCREENSHOT"):  # docs/report-video.jpg: GRADCAM_SCREENSHOT=docs/report-video.jpg
        page.click("#reset")
        page.evaluate("window.scrollTo(0, 0)")  # the page's own coordinates: the sticky toolbar stays at the top
        box = page.locator("#cards").bounding_box()
        page.screenshot(path=os.environ["GRADCAM_SCREENSHOT"], type="jpeg", quality=80, full_page=True, clip=box)
    close(page, errors)


@pytest.mark.slow
def test_without_pyav_the_page_says_so_in_one_line_on_the_video_card(browser: Any, built: Built, tmp_path: Path) -> None:
    from test_report_page import close, open_page

    assert without_pyav(built, tmp_path / "copy").code == 0
    page, errors = open_page(browser, tmp_path / "copy" / "out" / "report" / "index.html")
    card = page.locator("#cards article.card-video")
    assert card.locator(".strip").count() == 0 and card.locator("p.strip-note").count() == 1
    assert card.locator("p.strip-note").inner_text() == "no key frames: PyAV is not installed (pip install 'gradcam-cli[video]')"
    assert card.locator("video.overlay-video").count() == 1  # the video is still linked and in place
    close(page, errors)


def test_a_volume_explained_whole_by_a_3d_model_is_a_volume_card(tmp_path: Path, monkeypatch) -> None:
    """One record of the whole volume (as explain writes it for a 3-D model: its intensity, no slice), its montage and
    its NIfTI map beside it: a volume card that says so, not an image card of a .nii.gz."""
    import json

    from gradcam_cli.report.build import build_report

    monkeypatch.chdir(tmp_path)
    (tmp_path / "out").mkdir()
    Image.new("RGB", (300, 120), (20, 40, 60)).save(tmp_path / "out" / "ct.nii.gz.hirescam.png")
    (tmp_path / "out" / "ct.nii.gz.hirescam.nii.gz").write_bytes(b"map")
    montage = "out/ct.nii.gz.hirescam.png"
    record = {
        "input": "ct.nii.gz", "ok": True, "model": "net", "method": "hirescam", "frame": None, "slice": None,
        "intensity": "window 0,400", "class_index": 1, "class_name": "lesion", "probability": 0.9, "outputs": [montage],
        "targets": [{"class_index": 1, "class_name": "lesion", "probability": 0.9, "overlay": montage}],
    }  # fmt: skip
    (tmp_path / "out" / "records.jsonl").write_text(json.dumps(record) + "\n")
    data = read_data(build_report(tmp_path / "out").parent)
    (card,) = data["cards"]
    assert card["kind"] == "volume" and card["whole"] is True and card["intensity"] == "window 0,400"
    assert card["nifti"] == "../ct.nii.gz.hirescam.nii.gz" and card["overlay"] == "../ct.nii.gz.hirescam.png"
    assert card["overlay_thumb"] is not None and card["class_name"] == "lesion"
    assert data["header"]["counts"]["volumes"] == 1 and data["header"]["counts"]["slices"] == 0
