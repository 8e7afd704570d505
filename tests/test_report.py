"""Ground truth, the files a run leaves beside its pictures, and `gradcam report` (the Python side; the page: test_report_page.py)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from conftest import EXAMPLES, ROOT, cli_env, cli_command

SHAPES = EXAMPLES / "shapes_images"
SHAPES_MODEL = ["--model", "test_resnet", "--weights", str(EXAMPLES / "shapes_model" / "shapes_test_resnet.safetensors")]
LABELS = ["--labels", str(EXAMPLES / "shapes_model" / "labels.txt")]


def read_data(report_dir: Path) -> dict:
    """data.js as the page reads it: one JSON.parse of a string literal (a JSON string is one)."""
    text = (report_dir / "data.js").read_text(encoding="utf-8").strip()
    prefix, suffix = "window.GRADCAM_REPORT = JSON.parse(", ");"
    assert text.startswith(prefix) and text.endswith(suffix)
    return json.loads(json.loads(text[len(prefix) : -len(suffix)]))


def class_folders(root: Path) -> Path:
    """The shipped scenes in the ImageFolder layout: val/<class>/<file>."""
    for image in sorted(SHAPES.glob("*.jpg")):
        target = root / "val" / image.name.split("_")[0] / image.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(image, target)
    return root / "val"


# ------------------------------------------------------------------ ground truth


def test_class_names_match_folders_by_any_spelling():
    from gradcam_cli.inputs.truth import ClassIndex

    classes = ClassIndex(["tabby, tabby cat", "golden retriever", "tiger cat"], aliases=["n02123045", "n02099601", "n02123159"])
    assert classes.find("tabby") == 0 and classes.find("Tabby_Cat") == 0 and classes.find("n02123045") == 0
    assert classes.find("golden-retriever") == 1 and classes.find("GOLDEN  retriever") == 1
    assert classes.find("tiger cat") == 2, "a full name wins over another class's synonym"
    assert classes.find("2") == 2 and classes.find("7") is None and classes.find("cat") is None


def test_imagenet_classes_take_their_wordnet_ids_as_folder_names():
    from timm.data import ImageNetInfo

    from gradcam_cli.model.labels import class_aliases

    info = ImageNetInfo()
    timm_names = [info.index_to_description(i) for i in range(1000)]
    assert class_aliases(timm_names)[281] == "n02123045"
    torchvision_names = [name.split(",")[0] for name in timm_names]  # torchvision's categories are the first synonym
    assert class_aliases(torchvision_names)[0] == "n01440764"
    assert class_aliases(["circle", "square"]) is None and class_aliases(None) is None


def test_a_truth_file_matches_paths_from_its_folder_and_bare_names(tmp_path):
    from gradcam_cli.inputs.truth import load_ground_truth

    (tmp_path / "labels").mkdir()
    truth_file = tmp_path / "labels" / "truth.csv"
    truth_file.write_text("path,class\n../imgs/a.jpg,square\nb.jpg,1\nc,circle\ndup/d.jpg,star\nother/d.jpg,circle\nx.jpg,hexagon\n")
    said = []
    truth = load_ground_truth(truth_file, ["circle", "square", "triangle", "star"], None, said.append)
    assert truth.of(tmp_path / "imgs" / "a.jpg").name == "square", "relative to the file's own folder"
    assert truth.of(Path("somewhere/b.jpg")).index == 1, "a bare name matches any folder; a digit is an index"
    assert truth.of(Path("c.png")).name == "circle", "a bare stem matches too (Kaggle's id,label)"
    assert truth.of(Path("elsewhere/d.jpg")) is None, "a bare name two rows share says nothing"
    assert truth.of(tmp_path / "labels" / "dup" / "d.jpg").name == "star"
    assert truth.of(Path("x.jpg")).index is None and truth.of(Path("x.jpg")).name == "hexagon"
    assert len(said) == 1 and "hexagon" in said[0] and "count as wrong" in said[0]


@pytest.mark.parametrize(
    "text,expected",
    [("", "has no rows"), ("path,class\n", "has no rows"), ("a.jpg\n", "row 1: expected `path,class`"), ("a.jpg,\n", "row 1")],
)
def test_a_bad_truth_file_is_one_clear_line(tmp_path, text, expected):
    from gradcam_cli.errors import UsageError
    from gradcam_cli.inputs.truth import load_ground_truth

    (tmp_path / "t.csv").write_text(text)
    with pytest.raises(UsageError, match="truth") as error:
        load_ground_truth(tmp_path / "t.csv", ["a"], None)
    assert expected in str(error.value)


def test_the_folder_layout_gives_the_truth_and_the_records_say_right_or_wrong(tmp_path, run_cli):
    val = class_folders(tmp_path)
    (val / "square" / "circle_1.jpg").write_bytes((val / "circle" / "circle_1.jpg").read_bytes())  # a circle filed as a square
    (tmp_path / "photos").mkdir()
    shutil.copy(SHAPES / "star_1.jpg", tmp_path / "photos" / "star_1.jpg")  # no class folder: no truth
    result = run_cli("explain", val, tmp_path / "photos", "-r", *SHAPES_MODEL, *LABELS, "-o", "out", "--json")
    assert result.code == 0, result.stderr
    records = {Path(r["input"]).relative_to(tmp_path).as_posix(): r for r in result.records()}
    assert records["val/circle/circle_1.jpg"]["true_class"] == "circle" and records["val/circle/circle_1.jpg"]["correct"] is True
    filed_wrong = records["val/square/circle_1.jpg"]
    assert (filed_wrong["true_class"], filed_wrong["true_index"], filed_wrong["correct"]) == ("square", 1, False)
    assert filed_wrong["class_name"] == "circle", "the explained class stays the model's top class"
    assert records["photos/star_1.jpg"]["true_class"] is None and records["photos/star_1.jpg"]["correct"] is None
    assert "1 of 9 with a known class wrong" in result.stderr


def test_a_truth_file_that_is_missing_fails_before_the_model_loads(run_cli):
    """What was done, not how long it took: the model's own code, which leaves a file when it is imported, never ran."""
    Path("net.py").write_text("from pathlib import Path\nPath('imported').touch()\ndef build():\n    raise SystemExit('built')\n")
    result = run_cli("explain", SHAPES, "--model", "net.py:build", "--truth", "nope.csv")
    assert result.code == 2 and not Path("imported").exists()
    assert result.stderr.strip() == "gradcam: error: --truth nope.csv: no such file; give a CSV file of `path,class` rows"


# ------------------------------------------------------------------ the files a run leaves


def test_a_run_keeps_its_records_and_says_what_it_was(run_cli):
    weights = EXAMPLES / "shapes_model" / "shapes_test_resnet.safetensors"
    result = run_cli("explain", SHAPES, *SHAPES_MODEL, *LABELS, "-o", "out", "--json")
    assert result.code == 0, result.stderr
    kept = Path("out/records.jsonl").read_text().splitlines()
    assert kept == result.stdout.splitlines(), "the records file holds the very lines stdout got"
    start, end = [json.loads(line) for line in Path("out/runs.jsonl").read_text().splitlines()]
    assert start["id"] == end["id"] and start["command"].startswith("gradcam explain ") and "--weights" in start["command"]
    assert start["weights_sha256"] == hashlib.sha256(weights.read_bytes()).hexdigest()
    assert (start["model"], start["method"], start["layers"], start["cwd"]) == ("test_resnet", "gradcam", ["layer4"], os.getcwd())
    assert end["interrupted"] is False and end["counts"]["done"] == 8 and end["finished"] >= start["started"]
    again = run_cli("explain", SHAPES, *SHAPES_MODEL, *LABELS, "-o", "out", "--json", "--skip-existing")
    assert again.code == 0 and len(Path("out/records.jsonl").read_text().splitlines()) == 16, "a second run adds its lines"
    assert len(Path("out/runs.jsonl").read_text().splitlines()) == 4


# ------------------------------------------------------------------ gradcam report


def test_report_of_a_run_with_truth(tmp_path, run_cli):
    val = class_folders(tmp_path)
    truth = tmp_path / "truth.csv"
    truth.write_text("".join(f"{p.relative_to(tmp_path).as_posix()},{p.parent.name}\n" for p in sorted(val.rglob("*.jpg"))))
    truth.write_text(truth.read_text().replace("val/star/star_1.jpg,star", "val/star/star_1.jpg,triangle"))  # planted
    result = run_cli("explain", val, "-r", *SHAPES_MODEL, *LABELS, "-o", "out", "--truth", truth, "--json", "--save-raw")
    assert result.code == 0, result.stderr
    built = run_cli("report", "out")
    assert built.code == 0, built.stderr
    index = Path(built.stdout.strip())
    assert index == Path("out/report/index.html") and index.is_file()
    data = read_data(index.parent)
    cards, header = data["cards"], data["header"]
    assert len(cards) == 8 and [card["id"] for card in cards] == list(range(8))
    assert header["counts"] == {
        "images": 8, "cards": 8, "failed": 0, "blank": 0, "skipped": 0, "with_truth": 8, "correct": 7, "wrong": 1
    }  # fmt: skip
    assert header["has_truth"] and header["models"] == ["test_resnet"] and header["layers"] == ["layer4"]
    assert header["detection"] is None and {card["kind"] for card in cards} == {"image"}, "a classifier's cards"
    assert header["runs"][0]["weights_sha256"] and header["runs"][0]["command"].startswith("gradcam explain")
    wrong = [card for card in cards if card["correct"] is False]
    assert [(card["name"], card["true_class"], card["predicted"]) for card in wrong] == [("star_1.jpg", "triangle", "star")]
    for card in cards:
        assert card["margin"] == pytest.approx(card["topk"][0]["probability"] - card["topk"][1]["probability"], abs=1e-6)
        for key in ("original", "overlay", "npy"):
            assert (index.parent / card[key]).is_file(), (key, card[key])
        for key in ("thumb", "overlay_thumb"):
            with Image.open(index.parent / card[key]) as thumb:
                assert thumb.size == (card["thumb_w"], card["thumb_h"]) and max(thumb.size) == 256
        assert card["overlay"].endswith(".gradcam.png") and card["npy"].endswith(".npy")


def test_report_merges_shards_and_keeps_a_full_record_over_a_skipped_one(tmp_path, run_cli):
    images = sorted(SHAPES.glob("*.jpg"))
    first = run_cli("explain", *images[:4], *SHAPES_MODEL, "-o", "out", "--json")
    second = run_cli("explain", *images[4:], *SHAPES_MODEL, "-o", "other", "--json")
    resumed = run_cli("explain", *images[:4], *SHAPES_MODEL, "-o", "out", "--json", "--skip-existing")
    assert first.code == second.code == resumed.code == 0
    Path("stdout.jsonl").write_text(second.stdout + "not a record\n")
    built = run_cli("report", "out", "stdout.jsonl")
    assert built.code == 0, built.stderr
    assert "stdout.jsonl: 1 line(s) are not gradcam records; left out" in built.stderr
    cards = read_data(Path("out/report"))["cards"]
    assert sorted(card["name"] for card in cards) == sorted(p.name for p in images)
    assert not any(card["skipped"] for card in cards) and all(card["overlay_thumb"] for card in cards)


def test_report_of_a_folder_without_records_is_one_line(run_cli):
    Path("empty").mkdir()
    result = run_cli("report", "empty")
    assert result.code == 2 and len(result.stderr.splitlines()) == 1
    assert "empty: no records.jsonl here" in result.stderr
    missing = run_cli("report", "empty", "gone.jsonl")
    assert missing.code == 2 and "gone.jsonl: no such records file" in missing.stderr


def test_a_card_without_its_files_says_so_and_the_rest_is_built(run_cli):
    result = run_cli("explain", SHAPES, *SHAPES_MODEL, "-o", "out", "--json")
    assert result.code == 0
    overlay = Path(result.records()[0]["outputs"][0])
    overlay.unlink()
    built = run_cli("report", "out")
    assert built.code == 0, built.stderr
    cards = read_data(Path("out/report"))["cards"]
    assert cards[0]["overlay"] is None and cards[0]["overlay_thumb"] is None and cards[0]["thumb"]
    assert all(card["overlay_thumb"] for card in cards[1:])


@pytest.mark.slow
def test_explain_report_is_built_after_ctrl_c_from_what_was_done(tmp_path):
    """Ctrl-C part way through a folder: the report holds the images done, the runs file says the run was stopped."""
    folder = tmp_path / "many"
    for copy in range(6):
        for image in SHAPES.glob("*.jpg"):
            (folder / str(copy)).mkdir(parents=True, exist_ok=True)
            shutil.copy(image, folder / str(copy) / image.name)
    command = cli_command("explain", folder, "-r", *SHAPES_MODEL, "-o", "out", "--json", "--report", "-b", 1)
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(), cwd=tmp_path)
    assert process.stdout is not None
    try:
        lines = [process.stdout.readline(), process.stdout.readline()]
        process.send_signal(signal.SIGINT)
        rest, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    records = [json.loads(line) for line in [*lines, *rest.splitlines()]]
    assert process.returncode == 130 and 2 <= len(records) < 48 and all(r["ok"] for r in records), stderr
    assert "report: out/report/index.html" in stderr and "Traceback" not in stderr
    assert len(read_data(tmp_path / "out" / "report")["cards"]) == len(records)
    end = json.loads((tmp_path / "out" / "runs.jsonl").read_text().splitlines()[-1])
    assert end["interrupted"] is True and end["counts"]["done"] == len(records)


@pytest.mark.slow
def test_the_report_needs_no_torch():
    """`gradcam report` reads records and pictures only: it starts in a moment, also where torch is slow to import."""
    code = "import sys, gradcam_cli.cli.app, gradcam_cli.report.build; print(sorted({'torch', 'timm'} & set(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    assert done.stdout.strip() == "[]", done.stderr


# ------------------------------------------------------------------ records from anywhere: bad lines are counted, never fatal

DEEP = 100_000  # far past the JSON reader's recursion limit


def _bad_lines(good: str) -> dict[str, str]:
    """A real record turned into each kind of line the report must leave out, each under an input of its own."""
    record = json.loads(good)

    def edited(name: str, **fields: object) -> str:
        return json.dumps({**record, "input": name, **fields}, ensure_ascii=False)

    def number(name: str, where: str, text: str) -> str:  # a number JSON has no word for, where the page reads it
        changed = {**record, where: [{**record[where][0], "probability": 12345.5}]}
        return edited(name, **{where: changed[where]}).replace("12345.5", text)

    return {
        "nan.jpg": number("nan.jpg", "targets", "NaN"),
        "infinity.jpg": number("infinity.jpg", "topk", "-Infinity"),
        "surrogate.jpg": edited("surrogate.jpg", true_class="X").replace('"true_class": "X"', '"true_class": "\\ud800 lone"'),
        "deep.jpg": edited("deep.jpg", settings="X").replace('"settings": "X"', '"settings": ' + "[" * DEEP + "]" * DEEP),
        "topk-string.jpg": edited("topk-string.jpg", topk="circle 0.99"),
        "targets-string.jpg": edited("targets-string.jpg", targets="circle"),
        "layers-number.jpg": edited("layers-number.jpg", layers=4),
        "no-probability.jpg": edited("no-probability.jpg", topk=[{"index": 0, "name": "circle"}]),
        "ok-string.jpg": edited("ok-string.jpg", ok="yes"),
        "metrics-list.jpg": edited("metrics-list.jpg", metrics=[1, 2]),
    }


def test_records_with_nan_lone_surrogates_deep_nesting_or_wrong_types_are_bad_lines(run_cli):
    """Each kind of line stopped the whole build with an internal error; now each is counted, left out, and said."""
    result = run_cli("explain", *sorted(SHAPES.glob("*.jpg"))[:2], *SHAPES_MODEL, *LABELS, "-o", "out", "--json")
    assert result.code == 0, result.stderr
    good = sorted(p.name for p in sorted(SHAPES.glob("*.jpg"))[:2])
    for number, (name, line) in enumerate(_bad_lines(result.stdout.splitlines()[0]).items()):
        assert "\n" not in line, name
        Path(f"bad{number}.jsonl").write_text(line + "\n", encoding="utf-8")
        built = run_cli("report", "out", f"bad{number}.jsonl")
        assert built.code == 0 and f"bad{number}.jsonl: 1 line(s) are not gradcam records; left out" in built.stderr, (name, built.stderr)
        assert sorted(card["name"] for card in read_data(Path("out/report"))["cards"]) == good, name


def test_runs_lines_with_nan_lone_surrogates_or_wrong_types_keep_what_is_right(run_cli):
    result = run_cli("explain", SHAPES / "circle_1.jpg", *SHAPES_MODEL, "-o", "out", "--json")
    assert result.code == 0, result.stderr
    run_id = json.loads(Path("out/runs.jsonl").read_text().splitlines()[0])["id"]
    with Path("out/runs.jsonl").open("a", encoding="utf-8") as runs:
        runs.write('{"id": ' + json.dumps(run_id) + ', "device": "\\udc80", "layers": 3, "shard": 7, "counts": {"done": 1.5}}\n')
        runs.write('{"id": "other", "command": "gradcam explain \\ud83d", "weights": ["w"], "counts": "many"}\n')
        runs.write('{"id": "third", "started": NaN}\n')
    built = run_cli("report", "out")
    assert built.code == 0, built.stderr
    runs = {run["model"]: run for run in read_data(Path("out/report"))["header"]["runs"]}
    assert set(runs) == {"test_resnet", None}, "the NaN line is no run; the other one shows what it has"
    assert runs["test_resnet"]["device"] == "cpu" and runs["test_resnet"]["layers"] == ["layer4"], "its good fields stay"
    assert runs["test_resnet"]["counts"]["done"] == 1 and runs[None]["command"] is runs[None]["weights"] is None


def test_records_naming_files_this_file_system_cannot_hold_are_cards_without_pictures(run_cli):
    """A record written elsewhere (a name of 300 bytes: fine on NTFS, too long here; a NUL) leaves its card without
    a picture; the rest of the report is built, and a name near the limit gets its thumbnail under a short name."""
    near = Path("a" * 239 + ".jpg")  # 243 bytes: its overlay name (+ .gradcam.png) still fits in 255
    shutil.copy(SHAPES / "circle_1.jpg", near)
    result = run_cli("explain", near, SHAPES / "square_1.jpg", *SHAPES_MODEL, "-o", "out", "--json")
    assert result.code == 0, result.stderr
    record = json.loads(result.stdout.splitlines()[1])
    long_name, nul_name = "é" * 150 + ".jpg", "nul\x00.jpg"
    with Path("out/records.jsonl").open("a", encoding="utf-8") as records:
        for name in (long_name, nul_name):
            overlay = f"out/{name}.gradcam.png"
            target = {**record["targets"][0], "overlay": overlay}
            records.write(json.dumps({**record, "input": name, "outputs": [overlay], "targets": [target]}, ensure_ascii=False) + "\n")
    built = run_cli("report", "out")
    assert built.code == 0, built.stderr
    assert "2 card(s) have no picture" in built.stderr
    cards = {card["input"]: card for card in read_data(Path("out/report"))["cards"]}
    assert set(cards) == {str(near), str(SHAPES / "square_1.jpg"), long_name, nul_name}
    for name in (long_name, nul_name):
        assert cards[name]["thumb"] is cards[name]["overlay_thumb"] is cards[name]["original"] is None
    for key in ("thumb", "overlay_thumb"):
        assert cards[str(near)][key] and len(Path(cards[str(near)][key]).name.encode()) < 64
        assert (Path("out/report") / cards[str(near)][key]).is_file()


def test_links_to_full_size_files_are_plain_paths_the_page_encodes_once(run_cli):
    """Spaces, accents, '#', '?' and '%' in names: the data holds the path as it is (app.js's url() encodes each
    segment once), so the file is there at exactly that path from the report folder. The page's side: test_report_page.py."""
    odd = Path("my photo é #1?%20.jpg")
    shutil.copy(SHAPES / "circle_1.jpg", odd)
    result = run_cli("explain", odd, *SHAPES_MODEL, "-o", "out", "--json", "--save-raw")
    assert result.code == 0, result.stderr
    assert run_cli("report", "out").code == 0
    (card,) = read_data(Path("out/report"))["cards"]
    assert card["original"] == f"../../{odd}"
    for key in ("original", "overlay", "npy"):
        assert (Path("out/report") / card[key]).is_file(), card[key]


def test_thumbnails_are_reused_while_fresh_and_remade_when_their_picture_changes(run_cli):
    """README: thumbnails are reused when fresh. Checked by what was done: the same files (inode, mtime), not seconds."""
    result = run_cli("explain", *sorted(SHAPES.glob("*.jpg"))[:3], *SHAPES_MODEL, "-o", "out", "--json")
    assert result.code == 0 and run_cli("report", "out").code == 0
    thumbs = sorted(Path("out/report/thumbs").iterdir())
    assert len(thumbs) == 6

    def identity(path: Path) -> tuple[int, int]:
        return path.stat().st_ino, path.stat().st_mtime_ns

    before = {path: identity(path) for path in thumbs}
    assert run_cli("report", "out").code == 0
    assert {path: identity(path) for path in thumbs} == before, "a rebuild rewrote a fresh thumbnail"
    overlay = Path(result.records()[0]["outputs"][0])
    later = max(mtime for _, mtime in before.values()) + 10**9
    os.utime(overlay, ns=(later, later))  # the overlay written again after its thumbnail
    assert run_cli("report", "out").code == 0
    changed = [path for path in thumbs if identity(path) != before[path]]
    assert len(changed) == 1 and changed[0].name.endswith("o.jpg"), changed


# ------------------------------------------------------------------ the colour legend


def test_the_legend_colours_are_the_overlays_colours():
    """report/legend.py's stops are what outputs/render.colorize draws at 0, 1/8, ..., 1, for every colour map."""
    import numpy as np

    from gradcam_cli.outputs.render import colorize
    from gradcam_cli.report.legend import STOPS
    from gradcam_cli.vocab import Colormap

    assert set(STOPS) == {colormap.value for colormap in Colormap}
    levels = np.linspace(0, 1, 9, dtype=np.float32)[None]
    for colormap in Colormap:
        drawn = ["#" + bytes(pixel.tolist()).hex() for pixel in colorize(levels, colormap)[0]]
        assert list(STOPS[colormap.value]) == drawn, colormap


@pytest.mark.parametrize(
    ("command", "colormap"),
    [
        ("gradcam explain val -r --model m --colormap viridis -o out", "viridis"),
        ("gradcam explain val --colormap=magma --colormap turbo", "turbo"),  # the last one wins, as on the command line
        ("gradcam explain val --model m", "jet"),  # the default
        ("gradcam eval val --model m --methods gradcam --colormap hot", "hot"),
        ("gradcam explain val --config run.yaml", None),  # the preset may set it: not known
        ("gradcam explain val --config=run.yaml --colormap gray", "gray"),  # flags win over a preset
        ("gradcam explain --labels --colormap val", "jet"),  # "--colormap" is the labels file's name there
        ("gradcam explain val -- --colormap hot", "jet"),  # after "--", inputs
        ("gradcam explain val --colormap", None),
        ("gradcam explain val --colormap rainbow", None),
        ("gradcam compare a.jpg --colormap hot", None),
        ("gradcam explain 'unbalanced", None),
        (None, None),
    ],
)
def test_the_legend_reads_a_colour_map_from_a_command_line_only_where_it_is_sure(command, colormap):
    from gradcam_cli.report.legend import run_colours

    assert run_colours({"command": command})[0] == colormap


def test_the_legend_follows_the_records_colour_maps_a_preset_included(run_cli):
    """Records name their colour map, so a preset's colours are known (the command line alone could not say them)."""
    Path("run.yaml").write_text("colormap: magma\n")
    first = run_cli("explain", SHAPES / "circle_1.jpg", *SHAPES_MODEL, "--config", "run.yaml", "-o", "out", "--json")
    assert first.code == 0, first.stderr
    assert first.records()[0]["settings"]["colormap"] == "magma"
    assert run_cli("report", "out").code == 0
    legend = read_data(Path("out/report"))["header"]["legend"]
    assert [(entry["colormap"], entry["norm"]) for entry in legend] == [("magma", "minmax")]
    second = run_cli("explain", SHAPES / "square_1.jpg", *SHAPES_MODEL, "--colormap", "plasma", "--norm", "none", "-o", "out")
    assert second.code == 0, second.stderr
    assert run_cli("report", "out").code == 0
    legend = read_data(Path("out/report"))["header"]["legend"]
    assert [(entry["colormap"], entry["norm"]) for entry in legend] == [("magma", "minmax"), ("plasma", "none")]


def test_records_from_before_colour_maps_take_the_runs_command_line_where_it_is_sure(run_cli):
    """Records written before they named their colour map: the runs file's command line says it, unless a preset
    could have set another (then no legend rather than a wrong one)."""
    import json

    Path("run.yaml").write_text("colormap: magma\n")
    runs = [("--config", "run.yaml"), ("--colormap", "plasma", "--norm", "none"), ("--colormap=hot",)]
    for photo, flags in zip(("circle_1.jpg", "square_1.jpg", "star_1.jpg"), runs):
        done = run_cli("explain", SHAPES / photo, *SHAPES_MODEL, *flags, "-o", "out", "--json")
        assert done.code == 0, done.stderr
    records = Path("out/records.jsonl")
    old = [json.loads(line) for line in records.read_text().splitlines()]
    for record in old:
        for key in ("style", "colormap", "alpha", "caption"):
            record["settings"].pop(key)
    records.write_text("".join(json.dumps(record) + "\n" for record in old))
    assert run_cli("report", "out").code == 0
    header = read_data(Path("out/report"))["header"]
    assert header["runs"][0]["colormap"] is None
    legend = header["legend"]
    assert [(entry["colormap"], entry["norm"], entry["runs"]) for entry in legend] == [("plasma", "none", [2]), ("hot", "minmax", [3])]


# ------------------------------------------------------------------ a detector's report: a card per object

DETECTOR_CLASSES = ["circle", "square", "triangle", "star"]
DETECTOR = ["--model", str(EXAMPLES / "shapes_detector.py") + ":build"]
DETECTOR_FILES = ["--weights", str(EXAMPLES / "shapes_detector_model" / "shapes_detector.safetensors")]
DETECTOR_LABELS = ["--labels", str(EXAMPLES / "shapes_detector_model" / "labels.txt")]
FOUND_IN_PICTURE, FOUND_IN_OWN = (255, 255, 255), (0, 255, 0)  # a kept box in the image's picture; in its own (--each)


def _painted(path: Path, boxes: dict[tuple[int, ...], tuple[int, int, int]], ground: tuple[int, int, int] = (0, 0, 0)) -> str:
    image = Image.new("RGB", (320, 240), ground)
    for box, colour in boxes.items():
        image.paste(colour, box)
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path)
    return str(path)


def _found(rank: int, box: tuple[int, ...], cls: int, score: float, match: str, names: list[str], **more: object) -> object:
    from gradcam_cli.outputs.records import DetectionRecord

    iou = 0.9 if match == "tp" else 0.1
    return DetectionRecord(
        rank, [float(v) for v in box], cls, names[cls], score, False, 0.5 + score / 4, True, match=match, iou=iou, **more
    )


def detector_run(root: Path, names: list[str] = DETECTOR_CLASSES) -> Path:
    """A detector's run with truth as explain writes it (records.py), its pictures included; returns the output folder.

    scene0: a circle (tp, its own picture as --each writes), a star (tp), a square where there is none (fp), a triangle
    missed (fn: the best candidate of its class scored 0.12); scene1: a star (tp), a circle missed with no candidate of
    its class; scene2: nothing found, nothing missed; broken.png failed. Each object is painted in the photo in a colour
    of its own, each kept box white on the black picture (green on its own), so a crop shows where it was cut from."""
    from gradcam_cli.outputs.records import ImageRecord, MissedRecord

    out, common = root / "out", {"model": "shapes_detector.py:build", "target": "detection", "method": "hirescam"}
    boxes = [
        [(20, 30, 100, 110), (180, 20, 260, 100), (200, 150, 300, 230), (40, 150, 120, 220)],
        [(100, 60, 200, 160), (250, 180, 310, 235)],
    ]
    colours = [(250, 0, 0), (0, 0, 250), (250, 250, 0), (0, 250, 250)]
    records = []
    for number, scene in enumerate([*boxes, []]):
        photo = _painted(root / "scenes" / f"scene{number}.png", dict(zip(scene, colours)), (90, 90, 90))
        kept = scene[:3] if number == 0 else scene[:1]
        picture = _painted(out / f"scene{number}.png.hirescam.png", dict.fromkeys(kept, FOUND_IN_PICTURE))
        records.append({"photo": photo, "picture": picture, "scene": scene})
    own = _painted(out / "scene0.png.hirescam.det0.png", {boxes[0][0]: FOUND_IN_OWN})
    detections = [
        [
            _found(0, boxes[0][0], 0, 0.95, "tp", names, overlay=own),
            _found(1, boxes[0][1], 3, 0.9, "tp", names),
            _found(2, boxes[0][2], 1, 0.6, "fp", names),
        ],
        [_found(0, boxes[1][0], 3, 0.8, "tp", names)],
        [],
    ]
    missed = [
        [MissedRecord(0, [40.0, 150.0, 120.0, 220.0], 2, names[2], [45.0, 150.0, 118.0, 222.0], 0.12, 0.85, False, 0.3, False)],
        [MissedRecord(0, [250.0, 180.0, 310.0, 235.0], 0, names[0])],
        [],
    ]
    lines = [
        ImageRecord(
            input=made["photo"], ok=True, layers=["backbone"], width=320, height=240, outputs=[made["picture"], *([own] if n == 0 else [])],
            detections=detections[n], missed=missed[n], settings={"colormap": "jet", "norm": "minmax"}, **common,
        ).to_json()
        for n, made in enumerate(records)
    ]  # fmt: skip
    lines.append(ImageRecord(input=str(root / "scenes" / "broken.png"), ok=False, error="broken.png: not a picture", **common).to_json())
    (out / "records.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


def _centre(path: Path) -> tuple[int, ...]:
    with Image.open(path) as image:
        return image.convert("RGB").getpixel((image.width // 2, image.height // 2))


def _near(colour: tuple[int, ...], want: tuple[int, ...]) -> bool:
    return max(abs(a - b) for a, b in zip(colour, want)) < 40  # JPEG


def test_a_detectors_report_has_a_card_per_object_its_box_cut_from_photo_and_map(tmp_path):
    from gradcam_cli.report.build import build_report

    index = build_report(detector_run(tmp_path))
    cards = read_data(index.parent)["cards"]
    assert [(c["kind"], c["class_name"], c.get("match")) for c in cards] == [
        ("detection", "circle", "tp"), ("detection", "star", "tp"), ("detection", "square", "fp"), ("missed", "triangle", "fn"),
        ("detection", "star", "tp"), ("missed", "circle", "fn"), ("empty", None, None), ("image", None, None),
    ]  # fmt: skip
    circle, star, square, triangle = cards[:4]
    assert (circle["score"], triangle["score"], triangle["candidate_score"], triangle["candidate_iou"]) == (0.95, None, 0.12, 0.85)
    assert cards[5]["candidate_box"] is None and triangle["box"] == [40.0, 150.0, 120.0, 220.0]
    assert circle["own_overlay"] and circle["overlay"].endswith(".det0.png") and circle["picture"].endswith("scene0.png.hirescam.png")
    assert not star["own_overlay"] and star["overlay"].endswith("scene0.png.hirescam.png") and star["picture"] is None
    for card, colour, shown in [
        (circle, (250, 0, 0), FOUND_IN_OWN),
        (star, (0, 0, 250), FOUND_IN_PICTURE),
        (square, (250, 250, 0), FOUND_IN_PICTURE),
    ]:
        assert card["original"].endswith("scene0.png") and (index.parent / card["original"]).is_file()
        assert _near(_centre(index.parent / card["thumb"]), colour), card["class_name"]
        assert _near(_centre(index.parent / card["overlay_thumb"]), shown), card["class_name"]
    for card in cards[:6]:
        assert card["thumb"] != cards[0]["thumb"] or card is circle, "a crop of its own per object"
        with Image.open(index.parent / card["thumb"]) as thumb, Image.open(index.parent / card["overlay_thumb"]) as drawn:
            assert thumb.size == drawn.size == (card["thumb_w"], card["thumb_h"]) and max(thumb.size) / min(thumb.size) <= 4 / 3 + 0.02
    empty, failed = cards[6:]
    assert empty["thumb_w"] == 256 and empty["overlay"].endswith("scene2.png.hirescam.png") and empty["picture"] is None
    assert not failed["ok"] and failed["error"] == "broken.png: not a picture"


def test_a_detectors_report_counts_each_class_found_right_wrong_and_missed(tmp_path):
    from gradcam_cli.report.build import build_report

    header = read_data(build_report(detector_run(tmp_path)).parent)["header"]
    table = header["detection"]
    assert table["has_truth"] and header["counts"]["cards"] == 8 and header["counts"]["failed"] == 1
    rows = {row["class_name"]: row for row in table["classes"]}
    assert [row["class_name"] for row in table["classes"]] == ["circle", "square", "triangle", "star"], "most errors first"
    figures = ("detections", "tp", "fp", "fn", "precision", "recall")
    assert {name: tuple(row[key] for key in figures) for name, row in rows.items()} == {
        "circle": (1, 1, 0, 1, 1.0, 0.5), "square": (1, 0, 1, 0, 0.0, None),
        "triangle": (0, 0, 0, 1, None, 0.0), "star": (2, 2, 0, 0, 1.0, 1.0),
    }  # fmt: skip
    assert tuple(table["all"][key] for key in figures) == (4, 3, 1, 2, 0.75, 0.6)
    assert rows["star"]["energy_in_box"] == pytest.approx((0.5 + 0.9 / 4 + 0.5 + 0.8 / 4) / 2)
    assert rows["triangle"]["energy_in_box"] is None, "a missed object's map is not a detection's"


def test_a_detectors_report_without_truth_has_no_matches_and_no_precision(tmp_path):
    from gradcam_cli.report.build import build_report

    out = detector_run(tmp_path)
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    for record in records:
        record["missed"] = None
        for found in record.get("detections") or []:
            found["match"] = found["iou"] = None
    (out / "records.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    data = read_data(build_report(out).parent)
    assert [c["kind"] for c in data["cards"]] == ["detection"] * 4 + ["empty", "image"]
    table = data["header"]["detection"]
    energy = pytest.approx(0.5 + (0.95 + 0.9 + 0.6 + 0.8) / 16)  # the mean of the detections' 0.5 + score / 4
    assert not table["has_truth"] and table["all"] == {
        "detections": 4, "tp": 0, "fp": 0, "fn": 0, "energy_in_box": energy, "precision": None, "recall": None
    }  # fmt: skip


def test_a_box_outside_its_photo_shows_the_whole_pictures(tmp_path):
    from gradcam_cli.report.build import build_report

    out = detector_run(tmp_path)
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    records[0]["detections"][1]["box"] = [400.0, 10.0, 500.0, 50.0]  # another photo's box, or a record edited by hand
    (out / "records.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    said: list[str] = []
    star = read_data(build_report(out, warn=said.append).parent)["cards"][1]
    assert (star["thumb_w"], star["thumb_h"]) == (256, 192) and star["overlay_thumb"] and said == []


def test_malformed_detection_records_are_bad_lines(tmp_path):
    """A detector's fields are checked as the others: boxes of four finite numbers, a score, a known match; each bad
    line counted and left out, the good ones shown."""
    from gradcam_cli.report.collect import collect

    out = detector_run(tmp_path)
    good = json.loads((out / "records.jsonl").read_text().splitlines()[0])
    found, lost = good["detections"][0], good["missed"][0]

    def edited(name: str, detections: object = None, missed: object = None) -> str:
        return json.dumps({**good, "input": name, "detections": detections or good["detections"], "missed": missed or good["missed"]})

    bad = [
        edited("three.png", [{**found, "box": [1, 2, 3]}]),
        edited("text.png", [{**found, "box": [1, 2, "3", 4]}]),
        edited("nan.png", [{**found, "score": 12345.5}]).replace("12345.5", "NaN"),
        edited("no-score.png", [{k: v for k, v in found.items() if k != "score"}]),
        edited("match.png", [{**found, "match": "maybe"}]),
        edited("rank.png", [{**found, "rank": 1.5}]),
        edited("energy.png", [{**found, "energy_in_box": "high"}]),
        edited("detections.png", "many"),
        edited("missed.png", missed={"rank": 0}),
        edited("candidate.png", missed=[{**lost, "candidate_box": [1, 2, 3, 4, 5]}]),
        edited("no-box.png", missed=[{k: v for k, v in lost.items() if k != "box"}]),
    ]
    (tmp_path / "bad.jsonl").write_text("\n".join(bad) + "\n", encoding="utf-8")
    said: list[str] = []
    collected = collect(out, [tmp_path / "bad.jsonl"], said.append)
    assert len(said) == 1 and said[0].endswith(f"bad.jsonl: {len(bad)} line(s) are not gradcam records; left out"), said
    assert len(collected.records) == 4


def test_a_crop_holds_its_box_with_a_margin_inside_the_photo():
    from gradcam_cli.report.thumbs import Crop, crop_region

    left, top, right, bottom = crop_region(Crop((100.0, 100.0, 140.0, 200.0), (320, 240)), (320, 240))
    assert left < 100 and top < 100 and right > 140 and bottom > 200, "the box and a margin"
    assert (bottom - top) / (right - left) <= 4 / 3 + 0.05, "a tall box's crop is widened"
    # past the corner: the box's 20 x 40 px inside, 8 px around, widened to 42 (3:4), shifted back inside
    assert crop_region(Crop((300.0, 200.0, 330.0, 250.0), (320, 240)), (320, 240)) == (278, 184, 320, 240)
    assert crop_region(Crop((140.0, 200.0, 100.0, 100.0), (320, 240)), (320, 240)) == (left, top, right, bottom), "corners in any order"
    assert crop_region(Crop((400.0, 10.0, 500.0, 50.0), (320, 240)), (320, 240)) is None, "outside the photo: no crop"
    side_by_side = crop_region(Crop((100.0, 100.0, 140.0, 200.0), (320, 240)), (2 * 320 + 3, 240 + 20))
    assert side_by_side == (left + 323, top, right + 323, bottom), "the map is the right end; a caption band is below"
    assert crop_region(Crop((100.0, 100.0, 140.0, 200.0)), (320, 240)) == (left, top, right, bottom), "no frame: the picture's own"


def test_crops_are_cut_from_one_decoding_per_picture_and_reused_while_fresh(tmp_path, monkeypatch):
    from gradcam_cli.report import thumbs
    from gradcam_cli.report.build import build_report

    out = detector_run(tmp_path)
    decoded: list[str] = []
    load = thumbs.load_image
    monkeypatch.setattr(thumbs, "load_image", lambda path, *args, **kwargs: decoded.append(Path(path).name) or load(path, *args, **kwargs))
    build_report(out)
    assert sorted(decoded) == sorted(["scene0.png", "scene1.png", "scene2.png", "scene0.png.hirescam.png", "scene1.png.hirescam.png",
                                      "scene2.png.hirescam.png", "scene0.png.hirescam.det0.png"]), decoded  # fmt: skip
    made = {path: (path.stat().st_ino, path.stat().st_mtime_ns) for path in (out / "report" / "thumbs").iterdir()}
    assert len(made) == 2 * 6 + 2
    decoded.clear()
    build_report(out)
    assert decoded == [] and {path: (path.stat().st_ino, path.stat().st_mtime_ns) for path in made} == made


@pytest.mark.slow  # builds the example detector and runs it twice
def test_report_of_a_real_detector_run(tmp_path, run_cli):
    """The example detector on three scenes: with --each a card per detection shows its own picture; without it (side by
    side) the image's picture, the map cut from its right half."""
    shapes = __import__("test_example_detector")._import("shapes")
    import numpy as np

    rng = np.random.default_rng(7)
    (tmp_path / "scenes").mkdir()
    for number in range(3):
        shapes.make_detection_scene(rng, 320, 256)[0].save(tmp_path / "scenes" / f"s{number}.png")
    for folder, flags in (("each", ["--each"]), ("side", ["--style", "side-by-side"])):
        result = run_cli("explain", "scenes", *DETECTOR, *DETECTOR_FILES, *DETECTOR_LABELS, "-o", folder, "--json", "--report", *flags)
        assert result.code == 0, result.stderr
        found = [d for record in result.records() for d in record["detections"]]
        data = read_data(Path(folder) / "report")
        cards, table = data["cards"], data["header"]["detection"]
        assert len(found) >= 3 and [c["kind"] for c in cards] == ["detection"] * len(found)
        assert [(c["class_name"], c["score"], c["box"]) for c in cards] == [(d["class_name"], d["score"], d["box"]) for d in found]
        assert table["all"]["detections"] == len(found) and not table["has_truth"] and table["all"]["fn"] == 0
        for card in cards:
            assert card["own_overlay"] is (folder == "each")
            assert card["overlay"].endswith(f".det{card['rank']}.png" if folder == "each" else ".hirescam.png")
            report = Path(folder) / "report"
            with Image.open(report / card["thumb"]) as photo, Image.open(report / card["overlay_thumb"]) as drawn:
                assert photo.size == drawn.size and max(photo.size) < 256, "a crop of the box, not the whole scene"
                difference = np.abs(np.asarray(photo, np.int16) - np.asarray(drawn, np.int16)).mean()
                assert difference > 10, "the map's crop is the map, not the photo beside it"
