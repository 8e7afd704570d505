"""Output names that fit every file system, and what a run may write over: each picture says what made it."""

from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path, PurePath

import pytest

from conftest import EXAMPLE_MODEL, write_image

SHAPES = (*EXAMPLE_MODEL, "--json")
OTHER = ("-m", "resnet18", "--no-pretrained", "--json")  # another model into the same folder

pytestmark = pytest.mark.usefixtures("one_thread")


def _files(record: dict) -> list[Path]:
    """Every file a record says its run wrote."""
    return [Path(t[key]) for t in record["targets"] for key in ("overlay", "raw", "guided") if t[key]]


# ---------------------------------------------------------------- names that do not fit


@pytest.mark.parametrize("extra", [(), ("--topk", "2", "--save-raw")], ids=["one map", "classes and raw maps"])
def test_names_of_244_bytes_and_more_get_a_short_name_that_a_resume_finds(run_cli, tmp_path, extra):
    names = [
        "x" * 240 + ".png",  # 244 bytes: `.gradcam.png` would make 256
        "x" * 239 + "y.png",  # the same first 239 bytes: only the hash of the path tells the two apart
        "語" * 83 + ".png",  # 253 bytes in 3-byte characters: the cut must not split one
        "short.png",  # a name that fits keeps today's name
    ]
    for seed, name in enumerate(names):
        write_image(tmp_path / name, 40, 32, seed=seed)
    first = run_cli("explain", *names, *SHAPES, "-o", "out", *extra)
    assert first.code == 0, first.stderr
    records = first.records()
    assert [r["ok"] for r in records] == [True] * 4, first.stderr
    written = [_files(r) for r in records]
    for files in written:
        for path in files:
            assert path.is_file() and len(os.fsencode(path.name)) <= 255, path.name
            assert path.name.endswith((".gradcam.png", ".npy")) or ".gradcam.class" in path.name
            assert path.parent == Path("out")
    assert {p.name for p in written[0]}.isdisjoint({p.name for p in written[1]}), "two inputs never share an output"
    assert [p.name for p in written[3]][0].startswith("short.png.gradcam.")
    assert sum("~" in p.name for files in written[:3] for p in files) == sum(len(files) for files in written[:3])
    assert first.stderr.count("shortened") == 1, "said once a run"

    again = run_cli("explain", *names, *SHAPES, "-o", "out", *extra, "--skip-existing")
    assert again.code == 0, again.stderr
    assert [r["skipped"] for r in again.records()] == [True] * 4
    assert [sorted(r["outputs"]) for r in again.records()] == [sorted(r["outputs"]) for r in records]


@pytest.mark.parametrize("method", ["gradcam", "gradcam-elementwise"])
def test_a_300_byte_multibyte_name_is_cut_whole_keeps_its_endings_and_stays_unique(method):
    """The namer on any length (a name read from a list may be longer than any file): the bound, the endings, the stem."""
    from gradcam_cli.outputs.naming import OutputNamer

    name = "語" * 100 + ".jpg"  # 304 bytes
    namer = OutputNamer(Path("out"), method, largest_class=999_999, raw=True, guided=True)
    base = PurePath("photos") / name
    overlay, npy, guided = namer.paths(base, 999_999, raw=True, guided=True)
    assert npy is not None and guided is not None
    for path, ending in ((overlay, ".class999999.png"), (npy, ".class999999.npy"), (guided, ".class999999.guided.png")):
        assert path.parent == Path("out/photos") and path.name.endswith(f".{method}{ending}")
        assert len(path.name.encode("utf-8")) <= 255  # strict UTF-8: no character was split
    # the stem does not depend on what else the run writes: a resume with other options finds the same name
    plain = OutputNamer(Path("out"), method).paths(base, None, raw=False)[0]
    assert plain.name.removesuffix(f".{method}.png") == overlay.name.removesuffix(f".{method}.class999999.png")
    assert namer.paths(PurePath("photos") / ("語" * 100 + "x.jpg"), 3, raw=False)[0].name != namer.paths(base, 3, raw=False)[0].name
    # bytes that are not UTF-8 (kept by surrogateescape) count one each
    odd = OutputNamer(Path("out"), method).paths(PurePath(os.fsdecode(b"\xff" * 250)), None, raw=False)[0]
    assert len(os.fsencode(odd.name)) <= 255 and odd.name.endswith(f".{method}.png")
    # names that fit are today's, to the byte: 255 exactly is kept, 256 is shortened
    fits = OutputNamer(Path("out"), "gradcam").paths(PurePath("y" * 243), None, raw=False)[0]
    assert fits.name == "y" * 243 + ".gradcam.png"
    assert "~" in OutputNamer(Path("out"), "gradcam").paths(PurePath("y" * 244), None, raw=False)[0].name


# ---------------------------------------------------------------- what a run may write over


def test_another_model_layer_or_style_never_replaces_an_output_unless_asked(run_cli, tmp_path):
    write_image(tmp_path / "a.png", 48, 40, seed=1)
    first = run_cli("explain", "a.png", *SHAPES, "-o", "mix")
    assert first.code == 0, first.stderr
    (overlay,) = _files(first.records()[0])
    before = overlay.read_bytes()
    from gradcam_cli.outputs.provenance import made_by_stamp

    made = made_by_stamp(overlay)  # what the picture says made it
    assert made is not None and made["weights_sha256"] == hashlib.sha256(Path(SHAPES[3]).read_bytes()).hexdigest()
    assert {key: made[key] for key in ("model", "method", "layers", "target", "style", "colormap", "alpha", "caption")} == {
        "model": "test_resnet", "method": "gradcam", "layers": ["layer4"], "target": "class",
        "style": "overlay", "colormap": "jet", "alpha": 0.5, "caption": False,
    }  # fmt: skip
    assert {"relu", "norm", "combine", "eigen_smooth", "aug_smooth", "preprocess"} <= set(made)
    refused = [
        (OTHER, (), "model test_resnet, this run resnet18"),
        (OTHER, ("--skip-existing",), "model test_resnet, this run resnet18"),  # not this run's output: not done
        (SHAPES, ("--layer", "layer3"), "layers layer4, this run layer3"),
        (SHAPES, ("--style", "contour"), "style overlay, this run contour"),
    ]
    for model, extra, said in refused:
        result = run_cli("explain", "a.png", *model, "-o", "mix", *extra)
        assert result.code == 1 and result.records() == [], (extra, result.stderr)
        (line,) = [line for line in result.stderr.splitlines() if "made by another run" in line]
        assert said in line and "--output-dir" in line and "--replace" in line, line
        assert overlay.read_bytes() == before, "the first run's picture is still there"

    same = run_cli("explain", "a.png", *SHAPES, "-o", "mix", "--skip-existing")
    assert [r["skipped"] for r in same.records()] == [True]
    rerun = run_cli("explain", "a.png", *SHAPES, "-o", "mix")  # its own outputs a run writes again, as ever
    assert rerun.code == 0 and [r["skipped"] for r in rerun.records()] == [False], rerun.stderr
    write_image(tmp_path / "foreign" / "a.png.gradcam.png", 8, 8)  # a file nothing says anything of: written over
    foreign = run_cli("explain", "a.png", *OTHER, "-o", "foreign")
    assert foreign.code == 0 and _files(foreign.records()[0]) == [Path("foreign/a.png.gradcam.png")], foreign.stderr

    replaced = run_cli("explain", "a.png", *OTHER, "-o", "mix", "--skip-existing", "--replace")
    assert replaced.code == 0, replaced.stderr
    (record,) = replaced.records()
    assert not record["skipped"] and record["model"] == "resnet18" and _files(record) == [overlay]
    # the picture says it is the second run's: a report pairs it with that record, never with the first
    from gradcam_cli.outputs.provenance import stamp_of

    assert stamp_of(overlay) == record["stamp"] != first.records()[0]["stamp"]
    from gradcam_cli.outputs.provenance import is_records_picture

    assert is_records_picture(record, overlay) and not is_records_picture(first.records()[0], overlay)
    _unstamped(tmp_path / "mix")  # as a folder from before stamps: the last record that wrote the picture owns it
    older, newer = first.records()[0], {k: v for k, v in record.items() if k != "stamp"}
    assert is_records_picture(newer, overlay, last=newer) and not is_records_picture(older, overlay, last=newer)


def test_a_report_never_shows_another_runs_map(run_cli, tmp_path):
    """The issue's mix/: test_resnet, then resnet18 (--replace) into one folder. The report's test_resnet card shows
    no map (resnet18's picture is at its path), says why, and resnet18's card shows it; so too for a folder written
    before pictures carried stamps, judged by which record wrote the picture last."""
    from test_report import read_data

    write_image(tmp_path / "a.png", 48, 40, seed=1)
    assert run_cli("explain", "a.png", *SHAPES, "-o", "mix").code == 0
    second = run_cli("explain", "a.png", *OTHER, "-o", "mix", "--replace")
    assert second.code == 0, second.stderr
    for stamped in (True, False):
        if not stamped:
            _unstamped(tmp_path / "mix")
        built = run_cli("report", "mix")
        assert built.code == 0 and "1 card(s) show no map: a later run with other settings wrote over" in built.stderr, built.stderr
        cards = {card["model"]: card for card in read_data(tmp_path / "mix" / "report")["cards"]}
        assert set(cards) == {"test_resnet", "resnet18"}
        assert cards["test_resnet"]["replaced"] and cards["test_resnet"]["overlay"] is None
        assert cards["test_resnet"]["overlay_thumb"] is None and cards["test_resnet"]["thumb"] is not None
        assert cards["resnet18"]["overlay"] is not None and "replaced" not in cards["resnet18"]


def _unstamped(folder: Path) -> None:
    """The folder as gradcam wrote it before pictures carried their stamp: no text chunk, no `stamp` in the records."""
    for png in folder.rglob("*.png"):
        data, kept, at = png.read_bytes(), [], 8
        while at < len(data):
            length = struct.unpack(">I", data[at : at + 4])[0]
            chunk = data[at : at + 12 + length]
            if not (chunk[4:8] == b"tEXt" and chunk[8:].startswith(b"gradcam\0")):
                kept.append(chunk)
            at += 12 + length
        png.write_bytes(data[:8] + b"".join(kept))
    for records in folder.glob("records*.jsonl"):
        lines = [json.loads(line) for line in records.read_text().splitlines()]
        records.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "stamp"}) + "\n" for r in lines))


def test_a_folder_from_before_stamps_is_judged_by_its_records_read_once(run_cli, tmp_path, monkeypatch):
    from gradcam_cli.outputs import run_files

    for index in range(6):
        write_image(tmp_path / "photos" / f"img{index}.png", 40, 32, seed=index)
    for shard in ("0/2", "1/2"):  # a sharded job: a records file per shard
        assert run_cli("explain", "photos", *SHAPES, "-o", "old", "--shard", shard).code == 0
    _unstamped(tmp_path / "old")
    with (tmp_path / "old" / "records.jsonl").open("a") as handle:  # a big records file: other inputs' lines
        for index in range(3000):
            output = f"old/elsewhere/{index}.png.gradcam.png"
            handle.write(json.dumps({"input": f"elsewhere/{index}.png", "ok": True, "model": "x", "outputs": [output]}) + "\n")
    other = run_cli("explain", "photos", *OTHER, "-o", "old", "--skip-existing")
    assert other.code == 1 and other.records() == [], other.stderr
    assert "made by another run (model test_resnet, this run resnet18" in other.stderr

    opened: list[str] = []
    read = getattr(run_files, "_json_lines", None)
    monkeypatch.setattr(run_files, "_json_lines", lambda path: (opened.append(path.name), read(path))[1], raising=False)
    again = run_cli("explain", "photos", *SHAPES, "-o", "old", "--skip-existing")
    assert [r["skipped"] for r in again.records()] == [True] * 6, again.stderr
    records_read = sorted(name for name in opened if name.startswith("records"))
    assert records_read == ["records.jsonl", "records.shard-0-of-2.jsonl", "records.shard-1-of-2.jsonl"], "each once, for 6 images"

    opened.clear()  # a folder whose pictures carry their stamp: the records are never read
    assert run_cli("explain", "photos", *SHAPES, "-o", "new").code == 0
    resumed = run_cli("explain", "photos", *SHAPES, "-o", "new", "--skip-existing")
    assert [r["skipped"] for r in resumed.records()] == [True] * 6
    assert not [name for name in opened if name.startswith("records")]


def test_a_resume_with_topk_lists_each_output_folder_once(run_cli, tmp_path, monkeypatch):
    """Which classes an earlier run wrote is known only from the folder: listed once a run, not once an image."""
    for index in range(5):
        write_image(tmp_path / "photos" / f"img{index}.png", 40, 32, seed=index)
    assert run_cli("explain", "photos", *SHAPES, "-o", "out", "--topk", "2").code == 0
    listed: list[Path] = []
    scandir = os.scandir
    folder = (tmp_path / "out" / "photos").resolve()

    def counting(path: object = ".") -> object:
        if Path(os.fsdecode(path)).resolve() == folder:  # type: ignore[arg-type]
            listed.append(folder)
        return scandir(path)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "scandir", counting)
    again = run_cli("explain", "photos", *SHAPES, "-o", "out", "--topk", "2", "--skip-existing")
    assert [r["skipped"] for r in again.records()] == [True] * 5, again.stderr
    assert len(listed) == 1
