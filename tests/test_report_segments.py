"""A segmenter's report: a card per region, the table per class in place of the confusion matrix, bad lines counted.

The run is real (`gradcam explain --each --truth masks`, then `gradcam report`)
on a network whose answer is known, as in tests/test_segmenters.py: a 1x1
convolution reads each pixel's colour, so red pixels are class 1, green 2,
blue 3, black the background, and the truth masks say where they disagree.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image, ImageDraw

from test_report import read_data

NET = '''
import torch
from torch import nn


class Paints(nn.Module):
    """0 background (black), 1 red, 2 green, 3 blue: every pixel read where it is (1x1 convolutions)."""

    def __init__(self):
        super().__init__()
        self.features = nn.Conv2d(3, 3, 1)
        self.head = nn.Conv2d(3, 4, 1)
        with torch.no_grad():
            self.features.weight.copy_(torch.eye(3)[:, :, None, None])
            self.features.bias.zero_()
            weights = [[0.0, 0, 0], [4, -2, -2], [-2, 4, -2], [-2, -2, 4]]
            self.head.weight.copy_(torch.tensor(weights)[:, :, None, None])
            self.head.bias.copy_(torch.tensor([1.0, 0, 0, 0]))

    def forward(self, x):
        return self.head(torch.relu(self.features(x)))
'''

NAMES = ["background", "red", "green", "blue"]
SIZE = 128
RED, GREEN, BLUE = (230, 20, 20), (20, 210, 40), (30, 60, 230)
# each scene: its shapes (kind, box, colour, the class the truth gives it: None, the colour's)
SCENES: dict[str, list[tuple[str, tuple[int, int, int, int], tuple[int, int, int], int | None]]] = {
    "s0.png": [("rect", (10, 12, 54, 50), RED, None), ("disc", (70, 20, 118, 68), GREEN, None), ("rect", (30, 80, 100, 116), BLUE, None)],
    "s1.png": [("disc", (12, 14, 60, 62), RED, None), ("rect", (70, 60, 118, 116), GREEN, 3)],  # truth: the green square is blue
    "s2.png": [("disc", (20, 20, 110, 110), BLUE, None), ("rect", (4, 4, 24, 24), RED, None)],  # truth: the blue disc, shifted
    "s3.png": [],  # black: nothing covers the minimum area
}


def _paint(draw: ImageDraw.ImageDraw, kind: str, box: tuple[int, int, int, int], fill: Any) -> None:
    (draw.ellipse if kind == "disc" else draw.rectangle)(box, fill=fill)


def segmenter_run(root: Path, names: list[str] = NAMES) -> Path:
    """`gradcam explain` of the scenes with --each and their truth masks, then `gradcam report`; returns the output folder.

    s0: red, green and blue all right; s1: the truth says the green square is blue (green predicted where it has no
    pixel: IoU 0; blue missed); s2: the truth's disc 12 px right of the blue one (IoU below 1), the red square right;
    s3: black, no region; broken.png: not a picture, failed."""
    from test_report_page import cli

    (root / "net.py").write_text(NET)
    (root / "labels.txt").write_text("\n".join(names) + "\n", encoding="utf-8")
    (root / "images").mkdir()
    (root / "masks").mkdir()
    for name, shapes in SCENES.items():
        photo, truth = Image.new("RGB", (SIZE, SIZE)), Image.new("L", (SIZE, SIZE))
        for kind, box, colour, told in shapes:
            _paint(ImageDraw.Draw(photo), kind, box, colour)
            shifted = (box[0] + 12, box[1], box[2] + 12, box[3]) if name == "s2.png" and colour == BLUE else box
            _paint(ImageDraw.Draw(truth), kind, shifted, told or 1 + (RED, GREEN, BLUE).index(colour))
        photo.save(root / "images" / name)
        truth.save(root / "masks" / name)
    (root / "images" / "broken.png").write_bytes(b"not a picture")
    model = ["--model", "net.py:Paints", "--labels", "labels.txt", "--input-size", "64", "--mean", "0", "--std", "1"]
    cli(root, "explain", "images", *model, "--each", "--truth", "masks", "-o", "out", code=1)
    cli(root, "report", "out")
    return root / "out"


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return read_data(segmenter_run(tmp_path_factory.mktemp("segments")) / "report")


def _cards(data: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(Path(c["input"]).name, c.get("kind"), c["class_name"], c.get("region")) for c in data["cards"]]


def test_a_segmenters_report_has_a_card_per_region_and_per_missed_region(report: dict[str, Any]) -> None:
    assert sorted(_cards(report)) == sorted([
        ("s0.png", "segment", "red", "predicted"), ("s0.png", "segment", "green", "predicted"),
        ("s0.png", "segment", "blue", "predicted"), ("s1.png", "segment", "red", "predicted"),
        ("s1.png", "segment", "green", "predicted"), ("s1.png", "segment", "blue", "missed"),
        ("s2.png", "segment", "red", "predicted"), ("s2.png", "segment", "blue", "predicted"),
        ("s2.png", "segment", "blue", "missed"), ("s3.png", "segment", None, None), ("broken.png", "image", None, None),
    ])  # fmt: skip
    cards = {(Path(c["input"]).name, c["class_name"], c.get("region")): c for c in report["cards"]}
    green = cards[("s1.png", "green", "predicted")]
    assert (green["iou"], green["dice"]) == (0.0, 0.0) and green["mean_probability"] > 0.7 and green["energy_in_region"] > 0.8
    assert green["area_fraction"] == pytest.approx(49 * 57 / SIZE**2, rel=0.05) and green["area"] > 0 and not green["blank"]
    missed = cards[("s1.png", "blue", "missed")]
    # the pixels truth calls blue: the green square, less the edge the model's 64 px input gives the background
    assert missed["missed_area"] == pytest.approx(green["area"], rel=0.1) and missed["mean_probability"] < 0.1 and missed["iou"] == 0.0
    blue = cards[("s2.png", "blue", "predicted")]
    assert 0.5 < blue["iou"] < 0.9 and blue["dice"] == pytest.approx(2 * blue["iou"] / (1 + blue["iou"]), abs=1e-5)
    for card in (card for card in report["cards"] if card["kind"] == "segment"):
        assert card["ok"] and card["thumb"] and card["overlay_thumb"] and card["original"].endswith(Path(card["input"]).name)
    for card in (green, missed, blue):  # --each: its own overlay, the outline drawn in it; the image's picture beside it
        suffix = f".miss{0}.png" if card["region"] == "missed" else f".seg{card['rank']}.png"
        assert card["own_overlay"] and card["overlay"].endswith(suffix) and card["picture"].endswith(".hirescam.png")
    empty = cards[("s3.png", None, None)]
    assert empty["overlay"].endswith("s3.png.hirescam.png") and not empty["own_overlay"] and empty["picture"] is None


def test_each_cards_thumbnail_is_its_own_region_and_the_photo_is_shared(report: dict[str, Any]) -> None:
    cards = [c for c in report["cards"] if c.get("region")]
    assert len({c["overlay_thumb"] for c in cards}) == len(cards), "a thumbnail of each region's own overlay"
    assert len({c["thumb"] for c in cards}) == 3, "one photo thumbnail per image"
    assert all((c["thumb_w"], c["thumb_h"]) == (SIZE, SIZE) for c in cards), "the whole pictures, not a cut"


def test_a_segmenters_table_per_class_replaces_the_confusion_matrix(report: dict[str, Any]) -> None:
    table, cards = report["header"]["segmentation"], report["cards"]
    assert table["has_truth"] and report["header"]["detection"] is None and report["header"]["has_truth"] is False
    rows = {row["class_name"]: row for row in table["classes"]}
    # green: IoU 1 in s0, 0 in s1 (predicted, not in truth); blue: 1, 0 (in truth, not predicted) and s2's shifted disc
    assert [row["class_name"] for row in table["classes"]] == ["green", "blue", "background", "red"], "the lowest IoU first"
    regions = {name: [c for c in cards if c["class_name"] == name and c.get("region") == "predicted"] for name in NAMES}
    for name in ("red", "green", "blue"):
        row, mine = rows[name], regions[name]
        assert row["regions"] == len(mine) and row["images"] == (2 if name == "green" else 3)
        for figure in ("area_fraction", "mean_probability", "energy_in_region"):
            assert row[figure] == pytest.approx(np.mean([c[figure] for c in mine]), abs=1e-6), (name, figure)
    assert (rows["blue"]["missed"], rows["red"]["missed"], rows["green"]["missed"]) == (2, 0, 0)
    # the masks at the photo's 128 px against the model's 64: a pixel or two along each edge apart
    assert 0.9 < rows["red"]["iou"] < rows["red"]["dice"] <= 1 and rows["green"]["iou"] == pytest.approx(0.5, abs=0.05)
    blue = [c["iou"] for c in cards if c["class_name"] == "blue" and c.get("region") == "predicted"]
    assert rows["blue"]["iou"] == pytest.approx(np.mean([*blue, 0.0]), abs=1e-6), "s1's blue: in truth only, IoU 0"
    per_image = {c["input"]: c["missed_area"] for c in cards if c["class_name"] == "blue"}  # the class's, on each of its cards
    assert rows["blue"]["missed_area"] == sum(per_image.values()) > 0 and rows["red"]["missed_area"] < 20
    background = rows["background"]
    assert background["regions"] == 0 and background["images"] == 4 and background["area_fraction"] is None and background["iou"] < 1
    every = table["all"]
    assert (every["images"], every["regions"], every["missed"]) == (4, 7, 2)
    assert every["iou"] == pytest.approx(np.mean([row["iou"] for row in table["classes"]]), abs=1e-6), "the mean of the classes'"
    assert every["missed_area"] == sum(row["missed_area"] for row in table["classes"])


def test_a_segmenters_records_without_truth_have_no_iou(tmp_path: Path) -> None:
    from gradcam_cli.report.build import build_report

    out = segmenter_run(tmp_path)
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    for record in records:
        record["overlap"] = None
        kept = [{**s, "iou": None, "dice": None, "missed_area": None} for s in record["segments"] or [] if s["region"] != "missed"]
        record["segments"] = kept if record["ok"] else None
    (out / "records.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    table = read_data(build_report(out).parent)["header"]["segmentation"]
    assert not table["has_truth"] and [row["class_name"] for row in table["classes"]] == ["red", "blue", "green"], "most regions first"
    assert all(row["iou"] is None and row["missed_area"] is None and row["missed"] == 0 for row in [*table["classes"], table["all"]])


def test_malformed_segment_records_are_bad_lines(tmp_path: Path) -> None:
    """A segmenter's fields are checked as a detector's: finite numbers, whole areas, a region of a known kind, a class;
    each bad line counted and left out, the good ones shown."""
    from gradcam_cli.outputs.records import ImageRecord, OverlapRecord, SegmentRecord
    from gradcam_cli.report.collect import collect

    region = SegmentRecord(0, 1, "red", "predicted", 100, 0.1, 12.5, 0.9, False, 0.8, 0.7, 0.82, 10)
    overlap = OverlapRecord(1, "red", 0.7, 0.82, 110, 100, 10)
    good = json.loads(ImageRecord(input="good.png", ok=True, segments=[region], overlap=[overlap]).to_json())
    found, one = good["segments"][0], good["overlap"][0]

    def edited(name: str, segments: object = None, overlaps: object = None) -> str:
        return json.dumps({**good, "input": name, "segments": segments or good["segments"], "overlap": overlaps or good["overlap"]})

    bad = [
        edited("kind.png", [{**found, "region": "elsewhere"}]),
        edited("no-kind.png", [{k: v for k, v in found.items() if k != "region"}]),
        edited("no-class.png", [{k: v for k, v in found.items() if k != "class_index"}]),
        edited("nan.png", [{**found, "iou": 12345.5}]).replace("12345.5", "NaN"),
        edited("inf.png", [{**found, "energy_in_region": 12345.5}]).replace("12345.5", "Infinity"),
        edited("area.png", [{**found, "area": 10.5}]),
        edited("text.png", [{**found, "mean_probability": "high"}]),
        edited("segments.png", "many"),
        edited("overlap.png", overlaps=[{**one, "iou": [0.5]}]),
        edited("true-area.png", overlaps=[{**one, "true_area": True}]),
        edited("overlap-class.png", overlaps=[{k: v for k, v in one.items() if k != "class_index"}]),
    ]
    (tmp_path / "records.jsonl").write_text("\n".join([json.dumps(good), *bad]) + "\n", encoding="utf-8")
    said: list[str] = []
    collected = collect(tmp_path, [], said.append)
    assert len(said) == 1 and said[0].endswith(f"records.jsonl: {len(bad)} line(s) are not gradcam records; left out"), said
    assert [record["input"] for record in collected.records] == ["good.png"]


def test_an_evaluations_regions_of_one_image_are_cards_of_their_own(tmp_path: Path) -> None:
    """`gradcam eval` on a segmenter writes a record per region and map set: two regions of one image stay two cards;
    a unit's rank that is no whole number is a bad line (records merge by it)."""
    from gradcam_cli.outputs.records import EvalRecord
    from gradcam_cli.report.build import build_report

    lines = [
        EvalRecord(input="a.png", ok=True, model="net.py:Paints", method="hirescam", segment=rank, region="predicted",
                   class_index=rank + 1, class_name=NAMES[rank + 1], metrics={"energy_in_region": 0.9}).to_json()
        for rank in (0, 1)
    ]  # fmt: skip
    lines.append(json.dumps({**json.loads(lines[0]), "input": "b.png", "segment": [0]}))
    (tmp_path / "records.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    said: list[str] = []
    cards = read_data(build_report(tmp_path, warn=said.append).parent)["cards"]
    assert [(c["input"], c["class_name"]) for c in cards] == [("a.png", "red"), ("a.png", "green")]
    assert "1 line(s) are not gradcam records" in said[0], said  # (and the pictures, not made here, are missing)
