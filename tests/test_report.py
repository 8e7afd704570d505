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
