"""`gradcam eval` as a user runs it: on the shipped example model and fresh scenes whose boxes are known.

One evaluation (two methods, every metric but ROAD, the three baselines) is
run once for the module and read by most tests: the records, eval.json,
eval.csv, the charts, the table. The acceptance checks of the issue are
here: Grad-CAM beats the random map on deletion and insertion; its maps
point at the shapes; its sanity-check correlation falls as stages are
randomised; a record's score equals the library's on the same maps. Then
each bad input: one clear line, nothing else lost.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from conftest import EXAMPLES, write_image
from test_pointing_game import _shapes

WEIGHTS = EXAMPLES / "shapes_model" / "shapes_test_resnet.safetensors"
LABELS = EXAMPLES / "shapes_model" / "labels.txt"
MODEL = ("--model", "test_resnet", "--weights", WEIGHTS, "--labels", LABELS)
METHODS = ("gradcam", "layercam")
BASELINES = ("random", "centre", "edges")
SCENES = 6
SIZES = [(240, 200), (200, 240), (260, 180)]


@pytest.fixture(scope="module")
def scenes(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Fresh scenes (a seed never used in training) and a CSV of their shapes' boxes."""
    shapes = _shapes()
    folder = tmp_path_factory.mktemp("scenes")
    rng = np.random.default_rng(20261201)
    rows = [["path", "x0", "y0", "x1", "y1", "class"]]
    for i in range(SCENES):
        width, height = SIZES[i % len(SIZES)]
        image, label, box = shapes.make_scene(rng, width, height)
        image.save(folder / f"scene_{i}.png")
        rows.append([f"scene_{i}.png", *map(str, box), shapes.CLASSES[label]])
    boxes = folder.parent / f"{folder.name}_boxes.csv"
    with boxes.open("w", newline="") as handle:
        csv.writer(handle).writerows(rows)
    return folder, boxes


@pytest.fixture(scope="module")
def evaluated(scenes, tmp_path_factory: pytest.TempPathFactory):
    """One evaluation of the scenes, every metric but ROAD, in this process."""
    import io

    from gradcam_cli.cli.app import main
    from gradcam_cli.cli.console import Streams

    folder, boxes = scenes
    out = tmp_path_factory.mktemp("eval")
    stdout, stderr = io.StringIO(), io.StringIO()
    args = [
        "eval",
        str(folder),
        *map(str, MODEL),
        "--methods",
        ",".join(METHODS),
        "--boxes",
        str(boxes),
        "--steps",
        "10",
        "--substrate",
        "blur",
    ]
    args += ["-o", str(out)]
    with pytest.raises(SystemExit) as exited:
        main(args, streams=Streams(io.StringIO(""), stdout, stderr))
    records = [json.loads(line) for line in stdout.getvalue().splitlines()]
    return exited.value.code, records, stderr.getvalue(), out


@pytest.mark.slow
def test_every_image_gets_a_record_per_method_and_baseline(evaluated) -> None:
    code, records, stderr, out = evaluated
    assert code == 0, stderr
    assert len(records) == SCENES * (len(METHODS) + len(BASELINES))
    assert {(r["method"], r["baseline"]) for r in records} == {*((m, False) for m in METHODS), *((b, True) for b in BASELINES)}
    on_disk = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert on_disk == records
    expected = {"deletion", "insertion", "drop", "drop_absolute", "increase", "pointing"}
    for record in records:
        assert record["ok"] and expected <= set(record["metrics"]), record
        assert len(record["curves"]["deletion"]) == len(record["fractions"]) == 11
        assert 0 <= record["metrics"]["deletion"] <= 1 and 0 <= record["metrics"]["insertion"] <= 1
        if record["baseline"]:
            assert record["sanity"] is None and "sanity" not in record["metrics"]
        else:
            assert record["layers"] == ["layer4"]
            assert len(record["sanity"]["spearman"]) == len(record["sanity"]["steps"]) >= 3
    by_image: dict[str, set[int]] = {}
    for record in records:
        by_image.setdefault(record["input"], set()).add(record["class_index"])
    assert all(len(classes) == 1 for classes in by_image.values()), "every map set explains the same class"


@pytest.mark.slow
def test_gradcam_beats_the_random_map_and_points_at_the_shapes(evaluated) -> None:
    """The issue's acceptance on the example model: deletion below random's, insertion above; the maps point at the shapes.

    With the blurred substrate: with zeros, scattered black pixels push these scenes out of the model's distribution
    so fast that the random map's deletion is as low as Grad-CAM's (24 scenes: 0.30 against 0.28; blurred: 0.80
    against 0.41), the artefact ROAD was made to avoid."""
    _, _, _, out = evaluated
    summary = json.loads((out / "eval.json").read_text())
    gradcam, random = summary["results"]["gradcam"], summary["results"]["random"]
    print({k: (gradcam[k]["mean"], random[k]["mean"]) for k in ("deletion", "insertion", "drop", "pointing", "sanity")})
    assert gradcam["deletion"]["mean"] < random["deletion"]["mean"]
    assert gradcam["insertion"]["mean"] > random["insertion"]["mean"]
    assert gradcam["pointing"]["mean"] >= 5 / 6 and gradcam["pointing"]["n"] == SCENES
    assert summary["beats_baselines"]["gradcam"]["insertion"] is True


@pytest.mark.slow
def test_the_sanity_check_falls_as_stages_are_randomised(evaluated) -> None:
    """Grad-CAM's map is the trained model's (correlation 1 with itself) until the head is randomised; from then on it
    is another map. It falls at once (a random head weights layer4's channels at random), and never recovers."""
    _, _, _, out = evaluated
    sanity = json.loads((out / "eval.json").read_text())["sanity"]
    assert set(sanity) == set(METHODS)
    steps, curve = sanity["gradcam"]["steps"], sanity["gradcam"]["spearman"]
    print(steps, curve)
    assert steps == ["head", "layer4", "layer3", "layer2", "layer1", "stem"]
    assert max(curve) < 0.6 and curve[-1] < 0.5


@pytest.mark.slow
def test_the_summaries_and_charts(evaluated) -> None:
    _, _, stderr, out = evaluated
    summary = json.loads((out / "eval.json").read_text())
    assert summary["model"] == "test_resnet" and summary["images"] == SCENES and summary["methods"] == list(METHODS)
    for name in (*METHODS, *BASELINES):
        assert summary["results"][name]["deletion"]["n"] == SCENES
        stats = summary["results"][name]["insertion"]
        assert stats["low"] <= stats["mean"] <= stats["high"]
    for measure, leaders in summary["best"].items():
        means = [r[measure]["mean"] for r in summary["results"].values() if r[measure]["mean"] is not None]
        best = max(means) if summary["measures"][measure]["higher_is_better"] else min(means)
        assert leaders and all(summary["results"][name][measure]["mean"] == best for name in leaders)
    rows = list(csv.DictReader((out / "eval.csv").open()))
    assert len(rows) == len(summary["results"]) * len(summary["measures"])
    assert {row["map"] for row in rows if row["baseline"] == "True"} == set(BASELINES)
    for chart in ("eval_deletion.png", "eval_insertion.png", "eval_sanity.png", "eval_summary.png"):
        with Image.open(out / chart) as picture:
            assert picture.size[0] >= 600 and picture.mode == "RGB"
    # piped: the table goes to stderr, beside the records on stdout
    assert "deletion AUC" in stderr and "gradcam" in stderr and "★" in stderr and "(baseline)" in stderr


@pytest.mark.slow
def test_a_records_scores_equal_the_library_on_the_same_maps(evaluated) -> None:
    """The command measures what gradcam_cli.cam and evaluate.faithfulness measure on the same input."""
    import torch

    from gradcam_cli import cam, load_model
    from gradcam_cli.evaluate.faithfulness import confidence_change, deletion_insertion, substrate
    from gradcam_cli.vocab import Substrate
    from gradcam_cli.geometry import plan_geometry, to_input_array
    from gradcam_cli.inputs.decode import load_image

    _, records, _, _ = evaluated
    record = next(r for r in records if r["method"] == "gradcam")
    ready = load_model("test_resnet", weights=WEIGHTS, labels=LABELS, pretrained=False, device="cpu")
    photo = load_image(Path(record["input"]), 10**8)
    geometry = plan_geometry(photo.shape[:2], ready.data_config)
    x = torch.from_numpy(to_input_array(photo, geometry, ready.data_config))[None]
    classes = torch.tensor([record["class_index"]])
    maps = cam(ready.model, x, "layer4", classes=classes.tolist())
    curves = deletion_insertion(ready.model, x, maps, classes, steps=10, baseline=substrate(x, Substrate.blur))
    change = confidence_change(ready.model, x, maps, classes)
    assert record["metrics"]["deletion"] == pytest.approx(float(curves.deletion_auc()[0]), abs=1e-4)
    assert record["metrics"]["insertion"] == pytest.approx(float(curves.insertion_auc()[0]), abs=1e-4)
    assert record["metrics"]["drop"] == pytest.approx(float(change.drop_relative()[0]), abs=1e-4)


def test_report_puts_the_metrics_into_the_page(run_cli, scenes, tmp_path: Path) -> None:
    folder, _ = scenes
    out = tmp_path / "out"
    result = run_cli("eval", folder / "scene_0.png", folder / "scene_1.png", *MODEL, "--methods", "gradcam", "--metrics", "drop",
                     "--report", "--json", "-o", out)  # fmt: skip
    assert result.code == 0, result.stderr
    records = result.records()
    assert len(records) == 2 * 4
    for record in records:
        assert Path(record["targets"][0]["overlay"]).is_file()
    data = (out / "report" / "data.js").read_text()
    payload = json.loads(json.loads(data[data.index("JSON.parse(") + len("JSON.parse(") : data.rindex(")")]))
    assert {"drop", "drop_absolute"} <= set(payload["header"]["metrics"])
    assert len(payload["cards"]) == 8 and {card["method"] for card in payload["cards"]} == {"gradcam", *BASELINES}


def test_road_through_the_command(run_cli, scenes, tmp_path: Path) -> None:
    """Opt-in ROAD: its three measures in the records; Grad-CAM's combined score above the random map's."""
    folder, _ = scenes
    result = run_cli("eval", folder / "scene_0.png", *MODEL, "--methods", "gradcam", "--metrics", "road", "--json", "-o", tmp_path)
    assert result.code == 0, result.stderr
    by_map = {r["method"]: r["metrics"] for r in result.records()}
    assert set(by_map["gradcam"]) == {"road", "road_morf", "road_lerf"}
    gradcam, random = by_map["gradcam"], by_map["random"]
    assert gradcam["road"] == pytest.approx((gradcam["road_lerf"] - gradcam["road_morf"]) / 2, abs=2e-6)
    assert gradcam["road"] > random["road"]


def _one_line(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--metrics", "deletion,insertoin"), "--metrics 'insertoin' is unknown"),
        (("--methods", "gradcam,gradcamm"), "--methods 'gradcamm' is unknown"),
        (("--metrics", "pointing"), "needs to know where the objects are"),
        (("--boxes", "nowhere.csv"), "--boxes nowhere.csv: no such file"),
        (("--steps", "0"), "--steps 0"),
        (("--class", "0", "--class", "1"), "one class per image"),
        (("--substrate", "noise"), "--substrate 'noise' is unknown"),
    ],
)
def test_a_bad_option_is_one_line_and_exit_2(run_cli, scenes, args, says) -> None:
    folder, _ = scenes
    result = run_cli("eval", folder / "scene_0.png", *MODEL, *args)
    assert result.code == 2
    assert says in _one_line(result)


def test_bad_boxes_are_said_and_the_rest_still_counts(run_cli, scenes, tmp_path: Path) -> None:
    """Rows for images that are not inputs, and a box outside its image: a line each; every image still evaluated."""
    folder, boxes = scenes
    lines = boxes.read_text().splitlines()[:3]  # the header, scene_0 and scene_1
    lines += ["missing_1.png,1,1,20,20,circle", "missing_2.png,1,1,20,20,circle", "scene_1.png,900,900,950,950"]
    bad = tmp_path / "boxes.csv"
    bad.write_text("\n".join(lines) + "\n")
    inputs = (folder / "scene_0.png", folder / "scene_1.png")
    result = run_cli(
        "eval", *inputs, *MODEL, "--methods", "gradcam", "--metrics", "pointing", "--boxes", bad, "--json", "-o", tmp_path / "o"
    )
    assert result.code == 0, result.stderr
    assert "names 2 image(s) that are not among the inputs (missing_1.png, missing_2.png)" in result.stderr
    assert "outside" in result.stderr and "scene_1.png" in result.stderr
    records = result.records()
    assert len(records) == 2 * 4
    assert all(r["metrics"]["pointing"] is not None for r in records), "the in-image box of scene_1 still counts"


def test_a_broken_image_is_one_line_and_the_others_are_evaluated(run_cli, scenes, tmp_path: Path) -> None:
    folder, _ = scenes
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"\xff\xd8 not a jpeg")
    good = write_image(tmp_path / "good.png", 90, 70)
    result = run_cli("eval", broken, good, *MODEL, "--methods", "gradcam", "--metrics", "drop", "--json", "-o", tmp_path / "o")
    assert result.code == 1
    records = result.records()
    failed = [r for r in records if not r["ok"]]
    assert len(failed) == 1 and failed[0]["input"] == str(broken) and failed[0]["method"] is None
    assert len([r for r in records if r["ok"]]) == 4
    assert sum("broken.jpg" in line for line in result.stderr.splitlines()) == 1


def test_only_bad_inputs_load_no_model(run_cli, tmp_path: Path) -> None:
    result = run_cli("eval", tmp_path / "nothing.png", *MODEL, "-o", tmp_path / "o")
    assert result.code == 1
    assert "nothing.png" in _one_line(result)
    assert not (tmp_path / "o").exists()


def test_statistics_intervals() -> None:
    from gradcam_cli.evaluate.statistics import BOOTSTRAP_UP_TO, interval

    values = [0.1, 0.4, 0.35, 0.8, None, float("nan"), 0.2]
    first, again = interval(values), interval(values)
    assert first == again and first.n == 5
    assert first.low < first.mean < first.high and first.mean == pytest.approx(0.37)
    assert interval([]).mean is None and interval([0.5]).low is None
    big = interval(np.random.default_rng(0).uniform(size=BOOTSTRAP_UP_TO + 1).tolist())
    assert big.high - big.low == pytest.approx(2 * 1.96 * np.sqrt(1 / 12) / np.sqrt(BOOTSTRAP_UP_TO + 1), rel=0.05)


@pytest.mark.slow
def test_ctrl_c_keeps_the_summaries_of_what_was_done(tmp_path: Path) -> None:
    """Stopped part way: exit 130, every record written stays, eval.json says so and summarises those images."""
    import shutil
    import signal
    import subprocess

    from conftest import cli_command, cli_env

    folder = tmp_path / "many"
    for copy in range(4):
        for image in (EXAMPLES / "shapes_images").glob("*.jpg"):
            (folder / str(copy)).mkdir(parents=True, exist_ok=True)
            shutil.copy(image, folder / str(copy) / image.name)
    command = cli_command("eval", folder, "-r", *MODEL, "--methods", "gradcam", "--metrics", "deletion", "-b", 1, "-o", "out", "--json")
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(), cwd=tmp_path)
    assert process.stdout is not None
    try:
        lines = [process.stdout.readline() for _ in range(4)]  # the first image: gradcam and the three baselines
        process.send_signal(signal.SIGINT)
        rest, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    records = [json.loads(line) for line in [*lines, *rest.splitlines()]]
    assert process.returncode == 130 and 4 <= len(records) < 32 * 4, stderr
    assert "Traceback" not in stderr
    summary = json.loads((tmp_path / "out" / "eval.json").read_text())
    assert summary["interrupted"] is True and summary["images"] == len({r["input"] for r in records})
    assert len((tmp_path / "out" / "records.jsonl").read_text().splitlines()) == len(records)
    end = json.loads((tmp_path / "out" / "runs.jsonl").read_text().splitlines()[-1])
    assert end["interrupted"] is True


def test_the_summary_ties_baselines_and_failures() -> None:
    """Ties share the star; a method is 'better than the baselines' only when better than each; failures are counted."""
    from gradcam_cli.evaluate.measures import measures_of
    from gradcam_cli.evaluate.summary import EvalTotals
    from gradcam_cli.vocab import Metric

    totals = EvalTotals(measures_of([Metric.deletion, Metric.increase]))
    rows = [("a", False, 0.2, 1.0), ("b", False, 0.3, 1.0), ("random", True, 0.25, 0.0), ("edges", True, 0.4, 0.0)]
    for image in ("x.png", "y.png"):
        for name, baseline, deletion, increase in rows:
            totals.add(
                {"input": image, "ok": True, "method": name, "baseline": baseline, "metrics": {"deletion": deletion, "increase": increase}}
            )
    totals.add({"input": "z.png", "ok": False, "method": None})
    totals.add({"input": "y.png", "ok": False, "method": "b"})
    summary = totals.summary({"model": "m"})
    assert summary["best"] == {"deletion": ["a"], "increase": ["a", "b"]}
    assert summary["beats_baselines"]["a"] == {"deletion": True, "increase": True}
    assert summary["beats_baselines"]["b"]["deletion"] is False  # better than edges, not than random
    assert summary["images"] == 3 and summary["failed_images"] == 1 and summary["results"]["b"]["failed"] == 1
    assert summary["results"]["a"]["deletion"] == {"mean": 0.2, "low": 0.2, "high": 0.2, "n": 2}
