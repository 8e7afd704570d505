"""`gradcam explain` end to end on timm's tiny test models: files, records, exit codes, errors.

Heavy libraries (torch, timm) are imported inside tests only, after conftest
has pointed every cache at an empty folder and switched the hubs offline.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from conftest import ROOT, write_image

TINY = ("-m", "test_resnet", "--no-pretrained", "--json")
RECORD_KEYS = {
    "input",
    "outputs",
    "model",
    "layers",
    "method",
    "class_index",
    "class_name",
    "score",
    "probability",
    "topk",
    "blank",
    "error",
}


def explain(run_cli, out: Path, *args: str, stdin: str = ""):
    return run_cli("explain", *TINY, "-o", str(out), *args, stdin=stdin)


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("gradcam: error")]


def png_size(path: Path) -> tuple[int, int]:
    with Image.open(path) as image:
        assert image.format == "PNG"
        image.verify()
    with Image.open(path) as image:
        return image.size


# ---------------------------------------------------------------- one image


def test_single_image_writes_a_valid_overlay_of_the_input_size(run_cli, tmp_path):
    src = write_image(tmp_path / "cat.png", 96, 64, seed=5)
    result = explain(run_cli, tmp_path / "out", src)
    assert result.code == 0, result.stderr
    (record,) = result.records()
    overlay = Path(record["outputs"][0])
    assert overlay == tmp_path / "out" / "cat.png.gradcam.png"
    assert overlay.is_file()
    assert png_size(overlay) == (96, 64)
    pixels = np.asarray(Image.open(overlay).convert("RGB"))
    assert not np.array_equal(pixels, np.asarray(Image.open(src).convert("RGB")))
    assert (record["width"], record["height"]) == (96, 64)


def test_json_record_has_one_line_per_image_with_all_keys(run_cli, tmp_path, image_dir):
    result = explain(run_cli, tmp_path / "out", image_dir / "a.jpg", image_dir / "b.png")
    assert result.code == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert len(lines) == 2
    for line in lines:
        record = json.loads(line)
        assert RECORD_KEYS <= set(record)
        assert record["model"] == "test_resnet"
        assert record["layers"] == ["layer4"]
        assert record["method"] == "gradcam"
        assert record["error"] is None and record["blank"] is False
        assert isinstance(record["class_index"], int) and isinstance(record["class_name"], str)
        assert 0.0 < record["probability"] <= 1.0 and math.isfinite(record["score"])
        assert len(record["topk"]) == 5 and record["topk"][0]["index"] == record["class_index"]
    assert [r["input"] for r in result.records()] == [str(image_dir / "a.jpg"), str(image_dir / "b.png")]


# ---------------------------------------------------------------- many inputs


def test_folder_is_flat_without_r_and_mirrored_with_r(run_cli, tmp_path, image_dir):
    flat = explain(run_cli, tmp_path / "flat", image_dir)
    assert flat.code == 0, flat.stderr
    assert sorted(Path(r["input"]).name for r in flat.records()) == ["a.jpg", "b.png"]
    assert sorted(p.relative_to(tmp_path / "flat").as_posix() for p in (tmp_path / "flat").rglob("*.png")) == [
        "photos/a.jpg.gradcam.png",
        "photos/b.png.gradcam.png",
    ]
    deep = explain(run_cli, tmp_path / "deep", "-r", image_dir)
    assert deep.code == 0, deep.stderr
    assert len(deep.records()) == 3
    assert sorted(p.relative_to(tmp_path / "deep").as_posix() for p in (tmp_path / "deep").rglob("*.png")) == [
        "photos/a.jpg.gradcam.png",
        "photos/b.png.gradcam.png",
        "photos/sub/c.png.gradcam.png",
    ]
    assert png_size(tmp_path / "deep" / "photos" / "sub" / "c.png.gradcam.png") == (80, 80)


def test_paths_on_stdin_with_dash(run_cli, tmp_path, image_dir):
    stdin = f"{image_dir / 'b.png'}\n\n{image_dir / 'sub' / 'c.png'}\n"
    result = explain(run_cli, tmp_path / "out", "-", stdin=stdin)
    assert result.code == 0, result.stderr
    assert [r["input"] for r in result.records()] == [str(image_dir / "b.png"), str(image_dir / "sub" / "c.png")]
    assert all(Path(r["outputs"][0]).is_file() for r in result.records())


# ---------------------------------------------------------------- outputs


def test_save_raw_writes_float32_map_in_unit_range_at_original_size(run_cli, tmp_path):
    src = write_image(tmp_path / "in.png", 75, 50, seed=7)
    result = explain(run_cli, tmp_path / "out", "--save-raw", src)
    assert result.code == 0, result.stderr
    (record,) = result.records()
    raw_path = Path(record["targets"][0]["raw"])
    assert raw_path == tmp_path / "out" / "in.png.gradcam.npy"
    raw = np.load(raw_path, allow_pickle=False)
    assert raw.dtype == np.float32 and raw.shape == (50, 75)
    assert raw.min() >= 0.0 and raw.max() <= 1.0 and raw.max() > 0.0


def test_topk_two_writes_two_files_for_distinct_classes(run_cli, tmp_path):
    src = write_image(tmp_path / "in.png", seed=8)
    result = explain(run_cli, tmp_path / "out", "--topk", "2", src)
    assert result.code == 0, result.stderr
    (record,) = result.records()
    indices = [t["class_index"] for t in record["targets"]]
    assert len(indices) == 2 and indices[0] != indices[1]
    assert indices == [record["topk"][0]["index"], record["topk"][1]["index"]]
    assert len(record["outputs"]) == 2
    for index, output in zip(indices, record["outputs"]):
        assert Path(output).name == f"in.png.gradcam.class{index}.png" and Path(output).is_file()


def test_class_by_index_and_by_name_from_labels(run_cli, tmp_path):
    src = write_image(tmp_path / "in.png", seed=9)
    by_index = explain(run_cli, tmp_path / "a", "--class", "7", src)
    assert by_index.code == 0, by_index.stderr
    assert by_index.records()[0]["class_index"] == 7
    assert Path(by_index.records()[0]["outputs"][0]).name == "in.png.gradcam.class7.png"

    labels = tmp_path / "labels.txt"
    labels.write_text("".join(f"thing {i}\n" for i in range(1000)), encoding="utf-8")
    by_name = explain(run_cli, tmp_path / "b", "--labels", labels, "--class", "thing 42", src)
    assert by_name.code == 0, by_name.stderr
    record = by_name.records()[0]
    assert (record["class_index"], record["class_name"]) == (42, "thing 42")

    unknown = explain(run_cli, tmp_path / "c", "--labels", labels, "--class", "thing 4200", src)
    assert unknown.code == 2 and len(error_lines(unknown.stderr)) == 1


def test_exit_codes_0_1_2(run_cli, tmp_path):
    good = write_image(tmp_path / "good.png", seed=10)
    assert explain(run_cli, tmp_path / "o0", good).code == 0
    some_failed = explain(run_cli, tmp_path / "o1", good, tmp_path / "missing.png")
    assert some_failed.code == 1
    assert [r["error"] is None for r in some_failed.records()] == [True, False]
    usage = explain(run_cli, tmp_path / "o2", "--alpha", "3", good)
    assert usage.code == 2 and usage.stdout == ""
    assert not (tmp_path / "o2").exists()
    assert run_cli("explain", "--model", "test_resnet").code == 2  # no input at all


# ---------------------------------------------------------------- errors


def test_corrupt_image_in_folder_is_one_line_and_the_others_are_done(run_cli, tmp_path, image_dir):
    (image_dir / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n this is not really a png")
    result = explain(run_cli, tmp_path / "out", image_dir)
    assert result.code == 1
    records = {Path(r["input"]).name: r for r in result.records()}
    assert set(records) == {"a.jpg", "b.png", "broken.png"}
    assert records["broken.png"]["error"] and records["broken.png"]["outputs"] == []
    assert records["a.jpg"]["error"] is None and records["b.png"]["error"] is None
    assert (tmp_path / "out" / "photos" / "a.jpg.gradcam.png").is_file()
    assert (tmp_path / "out" / "photos" / "b.png.gradcam.png").is_file()
    mentions = [line for line in result.stderr.splitlines() if "broken.png" in line]
    assert len(mentions) == 1
    assert "Traceback" not in result.stderr


def test_unknown_model_suggests_a_close_name(run_cli, tmp_path):
    src = write_image(tmp_path / "in.png")
    result = run_cli("explain", "-m", "resnet5", "--no-pretrained", "-o", tmp_path / "out", src)
    assert result.code == 2
    assert result.stderr.strip().count("\n") == 0
    assert "resnet5" in result.stderr and "resnet50" in result.stderr and "did you mean" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_bad_layer_names_children_a_close_match_and_the_layers_command(run_cli, tmp_path):
    src = write_image(tmp_path / "in.png")
    result = explain(run_cli, tmp_path / "out", "--layer", "layer5", src)
    assert result.code == 2
    (line,) = result.stderr.strip().splitlines()
    for child in ("conv1", "layer1", "layer4", "fc"):
        assert child in line
    assert "did you mean 'layer4'" in line
    assert "gradcam layers test_resnet" in line
    assert not (tmp_path / "out").exists()


def test_missing_input_file_is_an_error_record(run_cli, tmp_path):
    missing = tmp_path / "nope.jpg"
    result = explain(run_cli, tmp_path / "out", missing)
    assert result.code == 1
    (record,) = result.records()
    assert record["input"] == str(missing) and "no such file" in record["error"]
    assert "nope.jpg" in result.stderr and "Traceback" not in result.stderr


def test_inputs_that_hold_no_image_fail_before_the_model_loads(run_cli, tmp_path, monkeypatch):
    from gradcam_cli.run import pipeline

    def no_model(*_args, **_kwargs):
        raise AssertionError("the model was loaded although no input holds an image")

    monkeypatch.setattr(pipeline, "Explainer", no_model)
    monkeypatch.chdir(tmp_path)  # short relative paths: messages shorten long ones
    Path("empty").mkdir()
    result = explain(run_cli, Path("out"), "nope.jpg", "empty", "zz*.png")
    assert result.code == 1
    assert result.stderr.splitlines() == [
        "gradcam: nope.jpg: no such file or folder",
        "gradcam: empty: no image file in this folder",
        "gradcam: zz*.png: the pattern matches no file",
    ]
    assert [(r["input"], r["ok"]) for r in result.records()] == [("nope.jpg", False), ("empty", False), ("zz*.png", False)]
    assert not Path("out").exists()


def test_a_failure_on_a_terminal_is_one_line_with_the_path_once(run_cli, tmp_path, image_dir, monkeypatch):
    """Human lines: the ✗ line is the failure's only mention; as JSON stderr has one line per failure."""
    (image_dir / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not a png")
    monkeypatch.chdir(tmp_path)
    human = run_cli("explain", "-m", "test_resnet", "--no-pretrained", "--no-json", "-o", "a", "photos", "nothere.jpg")
    assert human.code == 1, human.stderr
    for path in ("nothere.jpg", "photos/broken.png"):
        (line,) = [line for line in (human.stdout + human.stderr).splitlines() if path in line]
        assert line.startswith(f"✗ {path}: ") and line.count(path) == 1, line
    assert "✗ nothere.jpg: no such file or folder" in human.stdout.splitlines()
    as_json = explain(run_cli, Path("b"), "photos", "nothere.jpg")
    assert [line for line in as_json.stderr.splitlines() if "nothere.jpg" in line] == ["gradcam: nothere.jpg: no such file or folder"]
    assert [r["ok"] for r in as_json.records()] == [True, True, False, False]


def test_human_lines_for_done_skipped_and_failed_records():
    from gradcam_cli.cli.console import human_line as _human_line
    from gradcam_cli.outputs.records import ImageRecord

    skipped = ImageRecord(input="photo.jpg", ok=True, skipped=True, outputs=["out/photo.gradcam.png"])
    assert _human_line(skipped) == "↷ photo.jpg: skipped, outputs exist (out/photo.gradcam.png)"
    typed = ImageRecord(input="x.jpg", ok=False, error="./x.jpg: no such file or folder")  # the error says the path as typed
    assert _human_line(typed) == "✗ ./x.jpg: no such file or folder"
    bare = ImageRecord(input="x.jpg", ok=False, error="out of memory")
    assert _human_line(bare) == "✗ x.jpg: out of memory"
    done = ImageRecord(input="a.png", ok=True, outputs=["o/a.png"], class_index=3, class_name="cat", probability=0.5)
    assert _human_line(done) == "✓ a.png → o/a.png  class 3 cat p=0.500"


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "terminal"])
def test_a_failure_and_a_blank_map_are_each_said_once(as_json):
    """As JSON: the record on stdout and one stderr line. On a terminal: the image's own line says it all."""
    import io

    from gradcam_cli.cli.console import Reporter as _Reporter, Streams
    from gradcam_cli.outputs.records import ImageRecord, TargetRecord

    out, err = io.StringIO(), io.StringIO()
    reporter = _Reporter(Streams(io.StringIO(), out, err), as_json=as_json, progress=None)
    reporter.warn("out of memory on cpu with 8 images at once; retrying with 4")  # about the run: said as it comes
    blank = TargetRecord(class_index=3, class_name=None, score=1.0, probability=0.5, blank=True, overlay="o/a.png")
    reporter.record(
        ImageRecord(
            input="a.png", ok=True, outputs=["o/a.png"], class_index=3, probability=0.5, blank=True, targets=[blank], layers=["layer4"]
        )
    )
    reporter.record(ImageRecord(input="b.png", ok=False, error="b.png: cannot decode image (truncated)"))
    reporter.close()
    said = err.getvalue().splitlines()
    if as_json:
        assert said == [
            "gradcam: out of memory on cpu with 8 images at once; retrying with 4",
            "gradcam: a.png: the map for class 3 is blank (no positive evidence at layer4); try another --layer or --class",
            "gradcam: b.png: cannot decode image (truncated)",
        ]
        assert [json.loads(line)["input"] for line in out.getvalue().splitlines()] == ["a.png", "b.png"]
    else:
        assert said == ["gradcam: out of memory on cpu with 8 images at once; retrying with 4"]
        assert out.getvalue().splitlines() == [
            "✓ a.png → o/a.png  class 3 p=0.500  (blank map: try another --layer or --class)",
            "✗ b.png: cannot decode image (truncated)",
        ]


COLORMAPS = "jet, turbo, viridis, inferno, magma, plasma, hot, gray"


@pytest.mark.parametrize(
    "args,line",
    [
        (["--colormap", "rainbow"], f"--colormap 'rainbow' is unknown; use one of {COLORMAPS}"),
        (["--colormap", "trubo"], f"--colormap 'trubo' is unknown; use one of {COLORMAPS} (did you mean 'turbo'?)"),
        (["--norm", "raw"], "--norm 'raw' is unknown; use one of minmax, none"),
        (["--combine", "median"], "--combine 'median' is unknown; use one of mean, max, product, sum (did you mean 'mean'?)"),
        (["--precision", "fp64"], "--precision 'fp64' is unknown; use one of auto, fp32, bf16, fp16 (did you mean 'fp16'?)"),
    ],
)
def test_an_unknown_choice_is_one_plain_line(run_cli, tmp_path, args, line):
    result = run_cli("explain", "x.jpg", "-m", "test_resnet", "-o", tmp_path / "out", *args)
    assert result.code == 2 and result.stdout == ""
    assert result.stderr == f"gradcam: error: {line}\n"


def test_an_unknown_method_is_refused_like_the_other_choices(run_cli, tmp_path):
    from gradcam_cli.cams.methods import method_names

    result = run_cli("explain", "x.jpg", "-m", "test_resnet", "--method", "gradcm", "-o", tmp_path / "out")
    assert result.code == 2
    assert result.stderr == (
        f"gradcam: error: --method 'gradcm' is unknown; use one of {', '.join(method_names())} (did you mean 'gradcam'?)\n"
    )
    assert (
        run_cli(
            "explain",
            "x.jpg",
            "-m",
            "test_resnet",
            "--method",
            "GradCAM++",
            "--colormap",
            "Turbo",
            "--no-pretrained",
            "-o",
            tmp_path / "out",
        ).code
        == 1
    )  # known values in any case: only x.jpg is missing


@pytest.mark.parametrize(
    "args,line",
    [
        (["explain", "x.jpg", "--modle", "resnet50"], "No such option: --modle. Did you mean --model? (see: gradcam explain --help)"),
        (["layers", "--dpth", "2", "resnet18"], "No such option: --dpth. Did you mean --depth? (see: gradcam layers --help)"),
        (["explain", "x.jpg", "--alpha"], "Option '--alpha' requires an argument. (see: gradcam explain --help)"),
        (["metods"], "No such command 'metods'. Did you mean 'methods'? (see: gradcam --help)"),
    ],
)
def test_a_usage_error_names_the_help_of_its_command(run_cli, args, line):
    result = run_cli(*args)
    assert result.code == 2 and result.stdout == ""
    assert result.stderr == f"gradcam: error: {line}\n"


def test_no_arguments_show_the_help_not_an_error(run_cli):
    result = run_cli()
    assert result.code == 2
    assert result.stderr.startswith("Usage: gradcam") and "gradcam: error" not in result.stderr


def test_version(run_cli):
    from gradcam_cli import __version__

    result = run_cli("--version")
    assert result.code == 0
    assert result.stdout.strip() == f"gradcam {__version__}"


# ---------------------------------------------------------------- processes

HELP_SCRIPT = """
import sys
from gradcam_cli.cli.app import main
try:
    main(sys.argv[1:])
except SystemExit as exit_:
    assert not exit_.code, exit_.code
heavy = sorted(m for m in ("torch", "timm", "torchvision", "cv2") if m in sys.modules)
print("HEAVY:" + ",".join(heavy))
"""


@pytest.mark.parametrize("args", [["--help"], ["explain", "--help"], ["layers", "--help"]])
@pytest.mark.slow
def test_help_does_not_import_torch(args):
    done = subprocess.run([sys.executable, "-c", HELP_SCRIPT, *args], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "Usage" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "HEAVY:"


def _console_script() -> str:
    beside = Path(sys.executable).parent / "gradcam"
    found = str(beside) if beside.is_file() else shutil.which("gradcam")
    if not found:
        pytest.skip("the gradcam console script is not installed (pip install -e .)")
    return found


FAIL_FAST_SCRIPT = """
import sys
from gradcam_cli.cli.app import main
try:
    main(sys.argv[1:])
except SystemExit as exit_:
    print("CODE:", exit_.code)
print("HEAVY:" + ",".join(sorted(m for m in ("torch", "timm", "torchvision") if m in sys.modules)))
"""


@pytest.mark.slow
def test_a_missing_input_fails_at_once_without_loading_the_model(tmp_path):
    """resnet50 with pretrained weights would load torch and try a download (seconds); nothing of it happens."""

    def run(*args: str) -> tuple[float, subprocess.CompletedProcess]:
        start = time.monotonic()
        done = subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=tmp_path)
        return time.monotonic() - start, done

    gradcam = _console_script()
    startup = min(run(gradcam, "--help")[0] for _ in range(2))
    took, done = run(gradcam, "explain", "nothere.jpg", "--model", "resnet50")
    assert done.returncode == 1
    assert done.stderr == "gradcam: nothere.jpg: no such file or folder\n"
    (record,) = [json.loads(line) for line in done.stdout.splitlines()]
    assert record["input"] == "nothere.jpg" and record["ok"] is False
    assert took < max(3.0, 3 * startup), (took, startup)  # --help costs ~0.4 s here, loading the model ~7 s

    _, probe = run(sys.executable, "-c", FAIL_FAST_SCRIPT, "explain", "nothere.jpg", "--model", "resnet50")
    assert probe.stdout.splitlines()[-2:] == ["CODE: 1", "HEAVY:"], probe.stdout + probe.stderr


@pytest.mark.slow
def test_installed_console_script_explains(tmp_path):
    src = write_image(tmp_path / "in.png", 64, 48, seed=11)
    done = subprocess.run(
        [_console_script(), "explain", str(src), "-m", "test_resnet", "--no-pretrained", "-o", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
    )
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.strip().splitlines()  # piped stdout: JSON Lines by default
    record = json.loads(line)
    assert record["error"] is None and record["model"] == "test_resnet"
    assert png_size(Path(record["outputs"][0])) == (64, 48)


# ---------------------------------------------------------------- safety


def test_outputs_stay_in_output_dir_for_dotdot_inputs(run_cli, tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    write_image(tmp_path / "photos" / "a.png", seed=12)
    monkeypatch.chdir(work)
    result = explain(run_cli, Path("out"), "../photos/a.png", "../photos/../photos/a.png")
    assert result.code == 0, result.stderr
    out = (work / "out").resolve()
    written = [Path(o).resolve() for r in result.records() for o in r["outputs"]]
    # one file named two ways: one output, a function of the path alone (absolute above the current folder)
    assert len(written) == 2 and len(set(written)) == 1
    assert written[0] == out / (tmp_path / "photos" / "a.png.gradcam.png").relative_to("/")
    for path in written:
        assert path.is_relative_to(out) and path.is_file()
    assert sorted(p.name for p in tmp_path.joinpath("photos").iterdir()) == ["a.png"]


def test_an_input_is_never_overwritten(run_cli, tmp_path):
    """An input reached through a link into the output folder is protected from an overlay written there."""
    out = tmp_path / "out"
    write_image(tmp_path / "a.png", seed=13)
    write_image(out / "a.png.gradcam.png", seed=14)  # where a.png's overlay goes: a photo of the user's
    (tmp_path / "link.png").symlink_to(out / "a.png.gradcam.png")  # ... which is also an input, by a link
    before = (out / "a.png.gradcam.png").read_bytes()
    result = explain(run_cli, out, "a.png", "link.png", "--batch-size", "1")
    assert result.code == 1
    assert (out / "a.png.gradcam.png").read_bytes() == before, "the input behind link.png was overwritten"
    records = {Path(r["input"]).name: r for r in result.records()}
    assert records["link.png"]["error"] is None
    assert "overwrite" in records["a.png"]["error"]


def test_a_rerun_into_the_input_folder_skips_its_own_overlays(run_cli, tmp_path, monkeypatch):
    folder = tmp_path / "pics"
    write_image(folder / "a.png", seed=13)
    write_image(folder / "photo.v2.png", seed=16)  # dotted names are still inputs
    monkeypatch.chdir(folder)  # overlays beside the images: run where they are, with -o .
    first = explain(run_cli, Path("."), ".")
    second = explain(run_cli, Path("."), ".")
    assert first.code == second.code == 0
    names = sorted(Path(r["input"]).name for r in second.records())
    assert names == ["a.png", "photo.v2.png"]
    pictures = ["a.png", "a.png.gradcam.png", "photo.v2.png", "photo.v2.png.gradcam.png"]
    assert sorted(p.name for p in folder.iterdir()) == [*pictures, "records.jsonl", "runs.jsonl"]


# ---------------------------------------------------------------- image kinds


def test_exif_rotated_jpeg_gives_upright_overlay(run_cli, tmp_path):
    stored = write_image(tmp_path / "tmp.png", 96, 64, seed=15)
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90° clockwise to display
    path = tmp_path / "rotated.jpg"
    Image.open(stored).convert("RGB").save(path, exif=exif.tobytes())
    assert Image.open(path).size == (96, 64)
    result = explain(run_cli, tmp_path / "out", path)
    assert result.code == 0, result.stderr
    (record,) = result.records()
    assert (record["width"], record["height"]) == (64, 96)
    assert png_size(Path(record["outputs"][0])) == (64, 96)


def _odd_images(folder: Path) -> dict[str, tuple[int, int]]:
    rng = np.random.default_rng(16)
    gray = write_image(folder / "gray.png", 70, 50, seed=17, mode="L")
    rgba = Image.open(write_image(folder / "tmp_rgba.png", 60, 40, seed=18)).convert("RGBA")
    rgba.putalpha(Image.fromarray(rng.integers(0, 256, (40, 60), dtype=np.uint8)))
    rgba.save(folder / "rgba.png")
    palette = Image.open(write_image(folder / "tmp_p.png", 50, 70, seed=19)).convert("P", palette=Image.ADAPTIVE)
    palette.save(folder / "palette.png", transparency=0)
    deep = (rng.integers(0, 65536, (45, 55))).astype(np.uint16)
    Image.fromarray(deep).save(folder / "sixteen.png")
    for tmp in folder.glob("tmp_*"):
        tmp.unlink()
    assert Image.open(gray).mode == "L"
    assert Image.open(folder / "rgba.png").mode == "RGBA"
    with Image.open(folder / "palette.png") as image:
        assert image.mode == "P" and "transparency" in image.info
    assert Image.open(folder / "sixteen.png").mode.startswith("I")
    return {"gray.png": (70, 50), "rgba.png": (60, 40), "palette.png": (50, 70), "sixteen.png": (55, 45)}


def test_grayscale_palette_rgba_and_16bit_inputs(run_cli, tmp_path):
    sizes = _odd_images(tmp_path / "odd")
    result = explain(run_cli, tmp_path / "out", tmp_path / "odd")
    assert result.code == 0, result.stderr
    records = {Path(r["input"]).name: r for r in result.records()}
    assert set(records) == set(sizes)
    for name, size in sizes.items():
        assert records[name]["error"] is None
        assert png_size(Path(records[name]["outputs"][0])) == size


def test_crop_keeps_original_size_and_zeros_outside_the_crop(run_cli, tmp_path):
    import timm
    from timm.data import resolve_model_data_config

    width, height = 120, 60
    src = write_image(tmp_path / "wide.png", width, height, seed=20)
    result = explain(run_cli, tmp_path / "out", "--crop", "--save-raw", src)
    assert result.code == 0, result.stderr
    (record,) = result.records()
    assert record["settings"]["preprocess"] == "crop"
    assert png_size(Path(record["outputs"][0])) == (width, height)
    raw = np.load(record["targets"][0]["raw"])
    assert raw.shape == (height, width)

    config = resolve_model_data_config(timm.create_model("test_resnet", pretrained=False))
    side = config["input_size"][-1]
    visible = height * side / math.floor(side / config["crop_pct"])  # crop width in original pixels
    x0, x1 = (width - visible) / 2, (width + visible) / 2
    assert x0 > 10  # the test image really is cropped at the sides
    assert not raw[:, : math.floor(x0) - 1].any() and not raw[:, math.ceil(x1) + 1 :].any()
    assert raw[:, math.ceil(x0) + 1 : math.floor(x1) - 1].max() > 0


def test_the_human_output_and_the_progress_line_are_driven_through_the_streams(tmp_path):
    """Streams that say they are terminals get the ✓ lines and rich's progress line: no patching of sys."""
    import io

    from gradcam_cli.cli.app import main
    from gradcam_cli.cli.console import Streams

    images = [write_image(tmp_path / f"in{i}.png", seed=i) for i in range(2)]
    out, err = io.StringIO(), io.StringIO()
    streams = Streams(io.StringIO(), out, err, stdout_is_terminal=True, stderr_is_terminal=True)
    with pytest.raises(SystemExit) as exit_:
        main(["explain", *map(str, images), "-m", "test_resnet", "--no-pretrained", "-o", str(tmp_path / "o")], streams)
    assert exit_.value.code == 0, err.getvalue()
    lines = out.getvalue().splitlines()
    assert [line[:2] for line in lines] == ["✓ ", "✓ "] and all("→" in line for line in lines), lines
    assert "\x1b[" in err.getvalue() and "explained 2" in err.getvalue()  # rich drew its line on the "terminal"
    assert "explained 2 of 2 images" in err.getvalue()  # and the closing summary came after it


def test_modules_and_functions_stay_small() -> None:
    """A module over 400 lines or a function over 60 hides a second concern (docs/ARCHITECTURE.md)."""
    import ast

    too_big = []
    for path in sorted((ROOT / "gradcam_cli").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if text.count("\n") > 400:
            too_big.append(f"{path.relative_to(ROOT)}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 60:
                too_big.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {node.end_lineno - node.lineno + 1} lines")
    assert not too_big, too_big
