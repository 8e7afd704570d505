"""`gradcam eval` on a detector (README: Detectors, "Evaluating a detector's maps"): a unit per kept detection.

One evaluation of the shipped example detector on 8 fresh scenes (the
command the README shows) is run once for the module and read by the slow
tests: a record per detection and map set, the same detections for every map
set, hirescam's energy in box and pointing game beating every baseline, its
deletion curve falling faster than the random map's, the measures equal to
explain's records, the files and the report. The score-reading rule is
checked by hand on made-up outputs (fast); the other metrics run on one scene;
a metric or option that does not apply is one line.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import EXAMPLES, call_cli, write_image
from test_detectors import DETECTOR, _scenes

METHODS = ("hirescam", "gradcam")
BASELINES = ("random", "centre", "edges")
SCENES = 8
# the README's command (Detectors: "Evaluating a detector's maps"), with the scenes and the output folder here
README_ARGS = ("--methods", ",".join(METHODS), "--metrics", "deletion,insertion,energy,pointing", "--steps", "10")


# ---------------------------------------------------------------- the score-reading rule, by hand (fast)


def _found(boxes: list[list[float]], scores: list[float], labels: list[int]):
    from gradcam_cli.found import Detections

    return Detections(torch.tensor(boxes, dtype=torch.float32), torch.tensor(scores), torch.tensor(labels))


def test_a_detections_score_is_its_best_overlapping_box_of_its_class() -> None:
    """The rule of evaluate/detection_scoring.py: among the output boxes of the detection's class, the one that overlaps
    its box best gives its score (not the highest-scored one); no box of its class at IoU 0.5 or more: 0."""
    from gradcam_cli.evaluate.detection_scoring import matched_score

    box, square = torch.tensor([10.0, 10.0, 50.0, 50.0]), 1
    # its box moved by 5 px (IoU 0.62), a higher-scored box of its class far off, a box of another class exactly on it
    moved = _found([[15, 15, 55, 55], [100, 100, 140, 140], [10, 10, 50, 50]], [0.3, 0.9, 0.8], [square, square, 2])
    assert float(matched_score(moved, box, square)) == pytest.approx(0.3)
    # two boxes of its class: the better overlap wins over the higher score
    both = _found([[12, 12, 52, 52], [20, 20, 60, 60]], [0.2, 0.7], [square, square])
    assert float(matched_score(both, box, square)) == pytest.approx(0.2)
    # moved by 20 px: IoU (20x20 of 40x40 each) 400 / 2800 = 0.14 < 0.5, so 0 however sure the box is
    far = _found([[30, 30, 70, 70]], [0.95], [square])
    assert float(matched_score(far, box, square)) == 0.0
    # IoU exactly 0.5 counts (the box halved: 20x40 inside 40x40)
    half = _found([[10, 10, 30, 50]], [0.4], [square])
    assert float(matched_score(half, box, square)) == pytest.approx(0.4)
    assert float(matched_score(_found([[10, 10, 50, 50]], [0.9], [2]), box, square)) == 0.0, "only its own class counts"
    assert float(matched_score(_found(np.zeros((0, 4)).tolist(), [], []), box, square)) == 0.0


def test_perturbed_images_are_read_with_the_postprocessing_opened() -> None:
    """The scorer forwards each perturbed input inside the family's every_candidate and reads unit b in input b."""
    from gradcam_cli.evaluate.detection_scoring import DetectionScores

    opened: list[bool] = []

    class Family:
        name = "test"
        inside = False

        def read(self, output, model_name, input_hw):
            return output

        @contextlib.contextmanager
        def every_candidate(self, model):
            self.inside = True
            try:
                yield
            finally:
                self.inside = False

    family = Family()
    outputs = [_found([[0, 0, 10, 10], [40, 40, 60, 60]], [0.6, 0.8], [0, 1]), _found([[41, 41, 61, 61]], [0.5], [1])]

    def model(inputs: torch.Tensor):
        opened.append(family.inside)
        return [outputs[int(i)] for i in inputs[:, 0, 0, 0].long().tolist()]

    scorer = DetectionScores(family, torch.tensor([[0.0, 0, 10, 10], [40.0, 40, 60, 60]]), torch.tensor([0, 1]), (64, 64))
    inputs = torch.zeros(3, 3, 4, 4)
    inputs[1, 0, 0, 0] = 1  # input 1 is the second output
    inputs[2, 0, 0, 0] = 1
    scores = scorer(model, inputs, torch.tensor([1, 1, 0]))  # (unit 1 in output 0), (unit 1 in output 1), (unit 0 in output 1)
    assert scores.tolist() == pytest.approx([0.8, 0.5, 0.0]) and opened == [True] and scorer.count == 2


def test_which_metrics_run_by_default_and_which_are_refused() -> None:
    """A detector's defaults add energy and pointing in its own box; a classifier's add pointing only with boxes, and
    refuse energy (the option checks need no model: run/evaluation_units.py)."""
    from gradcam_cli.errors import UsageError
    from gradcam_cli.run.evaluation_units import ClassifyUnits, DetectUnits
    from gradcam_cli.vocab import Metric

    usual = (Metric.deletion, Metric.insertion, Metric.drop, Metric.increase, Metric.sanity)
    detector = object.__new__(DetectUnits)  # its metrics need no run
    assert detector.metrics(usual, True, None) == (*usual[:4], Metric.energy, Metric.pointing, Metric.sanity)
    assert detector.metrics((Metric.deletion,), False, None) == (Metric.deletion,)
    with pytest.raises(UsageError, match="does not apply to a detector"):
        detector.metrics(usual, True, Path("boxes.csv"))
    assert ClassifyUnits().metrics(usual, True, None) == usual
    assert ClassifyUnits().metrics(usual, True, Path("boxes.csv")) == (*usual[:4], Metric.pointing, Metric.sanity)
    with pytest.raises(UsageError, match="energy is a detector's"):
        ClassifyUnits().metrics((Metric.energy,), False, None)


def test_the_summary_pairs_map_sets_detection_by_detection() -> None:
    """Two detections of one image are two units: each map set's values pair by (image, detection), in any order."""
    from gradcam_cli.evaluate.measures import BY_NAME
    from gradcam_cli.evaluate.summary import EvalTotals

    totals = EvalTotals([BY_NAME["energy_in_box"]])
    for image in range(4):
        for detection in (1, 0):  # hirescam's records come in the other order than random's
            totals.add({"input": f"{image}.png", "ok": True, "method": "hirescam", "detection": detection,
                        "metrics": {"energy_in_box": 0.9 - 0.1 * detection}})  # fmt: skip
        for detection in (0, 1):
            totals.add({"input": f"{image}.png", "ok": True, "method": "random", "baseline": True, "detection": detection,
                        "metrics": {"energy_in_box": 0.85 - 0.1 * detection}})  # fmt: skip
    totals.add({"input": "empty.png", "ok": True, "method": None})  # a detector's image with no detection kept
    summary = totals.summary({})
    assert summary["images"] == 5 and summary["detections"] == 8 and summary["results"]["hirescam"]["energy_in_box"]["n"] == 8
    assert summary["beats_baselines"]["hirescam"]["energy_in_box"] is True, "0.05 better on each of the 8 detections"


# ---------------------------------------------------------------- the example detector (slow)


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory: pytest.TempPathFactory):
    """The README's command on 8 fresh scenes: the records (stdout, piped), the table (stderr), the output folder."""
    root = tmp_path_factory.mktemp("deteval")
    _scenes(root / "scenes", SCENES)
    out = root / "out"
    result = call_cli("eval", root / "scenes", *DETECTOR, *README_ARGS, "-o", out)
    assert result.code == 0, result.stderr
    return root, result.records(), result.stderr, out


@pytest.mark.slow
def test_a_record_per_detection_and_map_set_every_map_set_on_the_same_detections(evaluated) -> None:
    _, records, _, _ = evaluated
    by_unit: dict[tuple[str, int], list[dict]] = {}
    for record in records:
        assert record["ok"] and record["detection"] is not None, record
        by_unit.setdefault((record["input"], record["detection"]), []).append(record)
    assert len({name for name, _ in by_unit}) == SCENES and len(by_unit) >= 2 * SCENES
    for unit, sets in by_unit.items():
        assert sorted(r["method"] for r in sets) == sorted((*METHODS, *BASELINES)), unit
        assert len({(tuple(r["box"]), r["class_name"], r["probability"]) for r in sets}) == 1, "one detection, every map set"
        for record in sets:
            assert {"deletion", "insertion", "energy_in_box", "pointing"} == set(record["metrics"]), record
            # the unperturbed image reads the detection's own candidate: the curve starts at its score
            assert record["curves"]["deletion"][0] == pytest.approx(record["probability"], abs=1e-4)
            assert record["curves"]["insertion"][-1] == pytest.approx(record["probability"], abs=1e-4)


@pytest.mark.slow
def test_hirescam_beats_every_baseline_on_energy_in_box_and_the_pointing_game(evaluated) -> None:
    """The summary says so: beyond chance against each baseline, detection by detection; gradcam's pooled gradients
    spread its maps over the other objects (README, Detectors), so its figures are far lower, though above the baselines'."""
    _, _, table, out = evaluated
    summary = json.loads((out / "eval.json").read_text())
    results, beats = summary["results"], summary["beats_baselines"]
    print({name: {m: results[name][m]["mean"] for m in summary["measures"]} for name in results})
    assert beats["hirescam"]["energy_in_box"] is True and beats["hirescam"]["pointing"] is True
    assert summary["best"]["energy_in_box"] == ["hirescam"] and summary["best"]["pointing"] == ["hirescam"]
    assert results["hirescam"]["pointing"]["mean"] == 1.0 and results["hirescam"]["energy_in_box"]["mean"] > 0.8
    assert results["gradcam"]["pointing"]["mean"] < 0.8 and results["gradcam"]["energy_in_box"]["mean"] < 0.5
    assert beats["gradcam"]["energy_in_box"] is True
    assert max(results[b]["energy_in_box"]["mean"] for b in BASELINES) < 0.1
    assert f"{SCENES} images, {summary['detections']} detections" in table and "detection by detection" in table


@pytest.mark.slow
def test_deletion_of_a_detections_score_falls_faster_for_hirescam_than_for_the_random_map(evaluated) -> None:
    """On average over the detections (area under the deletion curve), and at the first step: a tenth of the pixels,
    the most relevant first, takes most of the score. Insertion from black is the other way round: the detection's own
    pixels restored first leave the object alone on black, which the detector scores low, and the centre and edge maps
    (whole regions of the scene) do better, beyond chance."""
    _, _, table, out = evaluated
    summary = json.loads((out / "eval.json").read_text())
    results, curves = summary["results"], summary["curves"]
    assert results["hirescam"]["deletion"]["mean"] < results["random"]["deletion"]["mean"]
    deletion, insertion = curves["hirescam"]["deletion"]["mean"], curves["hirescam"]["insertion"]["mean"]
    assert deletion[1] < 0.5 * deletion[0] and deletion[1] < 0.5 * curves["random"]["deletion"]["mean"][1]
    assert {"hirescam", "centre"} <= set(summary["best"]["deletion"]) and "random" not in summary["best"]["deletion"]
    assert summary["beats_baselines"]["hirescam"]["insertion"] is False and insertion[1] < 0.5 * insertion[-1]
    assert summary["best"]["insertion"] and set(summary["best"]["insertion"]) <= {"centre", "edges"}
    assert "hirescam: a baseline does better on insertion AUC" in table


@pytest.mark.slow
@pytest.mark.parametrize("method", METHODS)
def test_energy_and_pointing_are_explains_figures_for_the_same_detections(evaluated, method: str) -> None:
    """The measures are those explain's records give each detection (energy_in_box, peak_in_box), for the same boxes:
    hirescam's maps are the first method's, gradcam's explain its detections again (each one's own candidate), and
    both equal what explain draws for that detection."""
    root, records, _, _ = evaluated
    explained = call_cli("explain", root / "scenes", *DETECTOR, "--method", method, "-o", root / f"explained_{method}", "--json")
    assert explained.code == 0, explained.stderr
    found = {(r["input"], d["rank"]): d for r in explained.records() for d in r["detections"]}
    evaluated_here = {(r["input"], r["detection"]): r for r in records if r["method"] == method}
    assert set(found) == set(evaluated_here)
    for unit, record in evaluated_here.items():
        assert record["box"] == pytest.approx(found[unit]["box"], abs=0.02) and record["probability"] == pytest.approx(found[unit]["score"])
        assert record["metrics"]["energy_in_box"] == pytest.approx(found[unit]["energy_in_box"], abs=1e-3)
        assert record["metrics"]["pointing"] == float(found[unit]["peak_in_box"])


@pytest.mark.slow
def test_the_files_and_the_report_build_from_the_records(evaluated) -> None:
    from PIL import Image

    _, records, _, out = evaluated
    summary = json.loads((out / "eval.json").read_text())
    assert summary["unit"] == "detection" and summary["score"] == "detection score" and summary["images"] == SCENES
    rows = (out / "eval.csv").read_text().splitlines()
    assert len(rows) == 1 + len(summary["results"]) * len(summary["measures"])
    for chart in ("eval_deletion.png", "eval_insertion.png", "eval_summary.png"):
        with Image.open(out / chart) as picture:
            assert picture.size[0] >= 600
    report = call_cli("report", out)
    assert report.code == 0, report.stderr
    data = (out / "report" / "data.js").read_text()
    payload = json.loads(json.loads(data[data.index("JSON.parse(") + len("JSON.parse(") : data.rindex(")")]))
    assert len(payload["cards"]) == len(records), "a card per detection and map set"
    assert {"energy_in_box", "pointing", "deletion"} <= set(payload["header"]["metrics"])


@pytest.mark.slow
def test_every_other_metric_runs_on_a_detector_and_an_empty_image_is_said_once(tmp_path: Path) -> None:
    """Drop and increase (the image times the map, read by the same rule), ROAD, and the sanity check's cascading
    randomisation (each randomised copy explains the same detections: its best candidate of their class there), with the
    report's overlays; ⟨max_detections⟩ keeps the units as explain keeps detections; an image where nothing is detected
    is an ok record of no map set, said once."""
    from conftest import require

    require("scipy")
    from PIL import Image

    _scenes(tmp_path / "in", 1)
    for i in range(2):
        Image.fromarray(np.full((96, 128, 3), 40 * i, np.uint8)).save(tmp_path / "in" / f"blank{i}.png")
    metrics = ("--metrics", "drop,increase,road,sanity", "--max-detections", "2")
    result = call_cli("eval", tmp_path / "in", *DETECTOR, "--methods", "hirescam", *metrics, "--report", "-o", tmp_path / "o")
    assert result.code == 0, result.stderr
    records = result.records()
    empty = [r for r in records if r["method"] is None]
    assert len(empty) == 2 and all(r["ok"] for r in empty)
    assert result.stderr.count("nothing to evaluate in it (no detection kept)") == 1, result.stderr
    units = [r for r in records if r["method"] is not None]
    assert {r["method"] for r in units} == {"hirescam", *BASELINES} and {r["detection"] for r in units} == {0, 1}, "at most 2 kept"
    for record in units:
        assert {"drop", "drop_absolute", "increase", "road", "road_morf", "road_lerf"} <= set(record["metrics"]), record
        assert Path(record["targets"][0]["overlay"]).is_file() and f".det{record['detection']}.png" in record["targets"][0]["overlay"]
    hirescam = [r for r in units if r["method"] == "hirescam"]
    assert all(r["sanity"]["steps"][0] == "head" and len(r["sanity"]["spearman"]) == len(r["sanity"]["steps"]) for r in hirescam)
    assert all(r["metrics"]["sanity"] < 0.5 for r in hirescam), "randomised, the maps of a detection are others"
    assert (tmp_path / "o" / "report" / "index.html").is_file()


@pytest.mark.slow
def test_boxes_given_for_a_detector_are_one_line(run_cli, tmp_path: Path) -> None:
    """A detector's pointing game and energy are measured in each detection's own box: ⟨boxes⟩ is refused, not ignored."""
    _scenes(tmp_path / "in", 1)
    boxes = tmp_path / "boxes.csv"
    boxes.write_text("scene0.png,1,1,20,20\n")
    result = run_cli("eval", tmp_path / "in", *DETECTOR, "--methods", "hirescam", "--boxes", boxes, "-o", tmp_path / "o")
    assert result.code == 2
    (line,) = [line for line in result.stderr.splitlines() if line.strip()]
    assert "--boxes does not apply to a detector" in line and "Traceback" not in result.stderr


def test_energy_on_a_classifier_is_refused_in_one_line(run_cli, tmp_path: Path) -> None:
    """The one metric that does not apply to a task: energy in box needs a detection's own box."""
    photo = write_image(tmp_path / "photo.png", 64, 48)
    weights = EXAMPLES / "shapes_model" / "shapes_test_resnet.safetensors"
    model = ("--model", "test_resnet", "--weights", weights, "--labels", EXAMPLES / "shapes_model" / "labels.txt")
    result = run_cli("eval", photo, *model, "--methods", "gradcam", "--metrics", "deletion,energy", "-o", tmp_path / "o")
    assert result.code == 2
    (line,) = [line for line in result.stderr.splitlines() if line.strip()]
    assert "--metrics energy is a detector's" in line and "Traceback" not in result.stderr
