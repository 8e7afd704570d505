"""Output names that fit every file system, found again by a resume."""

from __future__ import annotations

import os
from pathlib import Path, PurePath

import pytest

from conftest import EXAMPLES, write_image

SHAPES = (
    "-m",
    "test_resnet",
    "--weights",
    str(EXAMPLES / "shapes_model" / "shapes_test_resnet.safetensors"),
    "--labels",
    str(EXAMPLES / "shapes_model" / "labels.txt"),
    "--json",
)

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
