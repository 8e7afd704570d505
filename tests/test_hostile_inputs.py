"""A corpus of hostile and odd inputs through the real CLI: every file gets the outcome a demanding user expects.

The corpus is generated in a temporary folder; each entry states what should
happen to it. One recursive run explains the whole folder; a few targeted runs
cover what needs its own options (`--max-pixels`, `--`, an unreadable file).

Expectations, in short:
- a readable image of any mode/format is explained (`ok: true`, overlay written,
  at the upright size of the image);
- a file that is not a readable image gets an error record (`ok: false`) with a
  one-line `error` that says what was wrong, and a line on stderr — never a traceback;
- the exit code is 1 when anything failed, and the stderr summary counts match.
"""

from __future__ import annotations

import io
import os
import re
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from conftest import pictures_in, write_image

TINY = ("-m", "test_resnet", "--no-pretrained", "--json")
SUMMARY = re.compile(r"explained (\d+) of (\d+) images(?:, (\d+) failed)?")


@dataclass(frozen=True)
class Expect:
    """What the user should get for one file: explained at `size` (width, height), or an error matching `error`."""

    size: tuple[int, int] | None = None  # upright (width, height) of a good image
    error: str | None = None  # regex the error message must match (case-insensitive)


def _photo(width: int, height: int, seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, size=(max(2, height // 8), max(2, width // 8), 3), dtype=np.uint8)
    return Image.fromarray(small).resize((width, height), Image.BILINEAR)


def _encoded(image: Image.Image, fmt: str, **params) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **params)
    return buffer.getvalue()


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def huge_png_header(width: int, height: int) -> bytes:
    """A 60-byte PNG whose header claims width x height 1-bit pixels (a decompression-bomb shape)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr) + _png_chunk(b"IDAT", zlib.compress(b"")) + _png_chunk(b"IEND", b"")


def build_corpus(folder: Path) -> dict[str, Expect]:
    """Write the corpus; returns {path relative to folder: expectation} for every IMAGE CANDIDATE.

    Entries that are deliberately NOT image candidates (the scan must not yield them):
    - `loop` -> `.`: a symlink to a folder; symlinked folders are never followed
      (os.walk(followlinks=False)), so no loop and no duplicates;
    - `dir.jpg/`: a folder named like an image; it is a folder, so it is scanned
      (with -r) rather than read — its content `dir.jpg/inside.png` IS a candidate;
    - `notes.txt`, `README`: suffixes that are not image suffixes are not candidates.
    The dangling symlink `dangling.png` IS a candidate (a file-like entry with an image
    suffix): it must give an error record, not vanish silently.
    """
    folder.mkdir(parents=True)
    expect: dict[str, Expect] = {}
    photo = _photo(120, 80, seed=1)
    jpeg, png = _encoded(photo, "JPEG", quality=90), _encoded(photo, "PNG")

    # ---- bad: not readable images
    (folder / "empty.jpg").write_bytes(b"")
    expect["empty.jpg"] = Expect(error=r"empty file \(0 bytes\)")
    (folder / "truncated.jpg").write_bytes(jpeg[: len(jpeg) // 2])
    expect["truncated.jpg"] = Expect(error=r"truncated")
    (folder / "truncated.png").write_bytes(png[: len(png) // 2])
    expect["truncated.png"] = Expect(error=r"truncated")
    (folder / "text.jpg").write_text("just some notes, not a picture\n")
    expect["text.jpg"] = Expect(error=r"a text file, not an image")
    (folder / "page.jpg").write_text("<!DOCTYPE html><html><body><img src='cat.jpg'></body></html>\n")
    expect["page.jpg"] = Expect(error=r"an HTML page, not an image")
    (folder / "bomb.png").write_bytes(huge_png_header(20000, 20000))  # 400 MP claimed, default limit 100 MP
    expect["bomb.png"] = Expect(error=r"400,000,000 pixels.*--max-pixels")
    os.symlink("nowhere.png", folder / "dangling.png")
    expect["dangling.png"] = Expect(error=r"broken symbolic link.*nowhere\.png")

    # ---- good: every mode and container Pillow reads
    photo.convert("CMYK").save(folder / "cmyk.jpg")
    expect["cmyk.jpg"] = Expect(size=(120, 80))
    rng = np.random.default_rng(2)
    Image.fromarray(rng.integers(0, 65536, (45, 55)).astype(np.uint16)).save(folder / "sixteen.png")
    expect["sixteen.png"] = Expect(size=(55, 45))
    _photo(50, 70, seed=3).convert("P", palette=Image.ADAPTIVE).save(folder / "palette.png", transparency=0)
    expect["palette.png"] = Expect(size=(50, 70))
    _photo(64, 48, seed=4).convert("LA").save(folder / "la.png")
    expect["la.png"] = Expect(size=(64, 48))
    _photo(40, 30, seed=5).convert("1").save(folder / "bilevel.png")
    expect["bilevel.png"] = Expect(size=(40, 30))
    frames = [_photo(60, 40, seed=s).convert("P") for s in (6, 7, 8)]
    frames[0].save(folder / "animated.gif", save_all=True, append_images=frames[1:], duration=50, loop=0)
    expect["animated.gif"] = Expect(size=(60, 40))
    pages = [_photo(70, 50, seed=s) for s in (9, 10)]
    pages[0].save(folder / "pages.tif", save_all=True, append_images=pages[1:])
    expect["pages.tif"] = Expect(size=(70, 50))
    for orientation in (6, 8):  # stored 96x64, displayed rotated by 90 degrees: upright 64x96
        exif = Image.Exif()
        exif[0x0112] = orientation
        _photo(96, 64, seed=orientation).save(folder / f"exif{orientation}.jpg", exif=exif.tobytes())
        expect[f"exif{orientation}.jpg"] = Expect(size=(64, 96))
    _photo(1, 1, seed=11).save(folder / "one_pixel.png")
    expect["one_pixel.png"] = Expect(size=(1, 1))
    _photo(3, 2, seed=12).save(folder / "tiny.png")
    expect["tiny.png"] = Expect(size=(3, 2))
    write_image(folder / "with space.jpg", 50, 40, seed=13)
    expect["with space.jpg"] = Expect(size=(50, 40))
    write_image(folder / "chat été 猫.png", 44, 33, seed=14)
    expect["chat été 猫.png"] = Expect(size=(44, 33))
    write_image(folder / "-dash.png", 36, 28, seed=15)
    expect["-dash.png"] = Expect(size=(36, 28))
    write_image(folder / "UPPER.JPEG", 30, 30, seed=16)
    expect["UPPER.JPEG"] = Expect(size=(30, 30))

    # ---- not candidates (see the docstring)
    os.symlink(".", folder / "loop")
    write_image(folder / "dir.jpg" / "inside.png", 32, 24, seed=17)
    expect["dir.jpg/inside.png"] = Expect(size=(32, 24))
    (folder / "notes.txt").write_text("not an image suffix\n")
    (folder / "README").write_text("no suffix\n")
    return expect


def _summary(stderr: str) -> tuple[int, int, int]:
    match = SUMMARY.search(stderr)
    assert match, stderr
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def _assert_clean_stderr(stderr: str) -> None:
    assert "Traceback" not in stderr, stderr
    assert not re.search(r"\b(IndexError|KeyError|AttributeError|TypeError|UnidentifiedImageError)\b", stderr), stderr


def _overlay_size(path: Path) -> tuple[int, int]:
    with Image.open(path) as image:
        assert image.format == "PNG"
        return image.size


def test_hostile_corpus_in_one_recursive_run(run_cli, tmp_path, one_thread):
    corpus = tmp_path / "corpus"
    expect = build_corpus(corpus)
    out = tmp_path / "out"
    result = run_cli("explain", str(corpus), "-r", *TINY, "-o", str(out), "-b", "4")
    _assert_clean_stderr(result.stderr)

    records = result.records()
    by_name = {Path(r["input"]).relative_to(corpus).as_posix(): r for r in records}
    assert len(by_name) == len(records), "an input was reported twice (symlink loop followed?)"
    # exactly the image candidates: no loop/ duplicates, no dir.jpg as a file, no notes.txt/README
    assert sorted(by_name) == sorted(expect)

    good = {name for name, e in expect.items() if e.error is None}
    bad = set(expect) - good
    for name, want in expect.items():
        record = by_name[name]
        if want.error is None:
            assert record["ok"] is True and record["error"] is None, (name, record["error"])
            assert (record["width"], record["height"]) == want.size, name
            assert record["outputs"], name
            for output in record["outputs"]:
                assert Path(output).is_file(), (name, output)
                assert Path(output).resolve().is_relative_to(out.resolve()), (name, output)
                assert _overlay_size(Path(output)) == want.size, name
        else:
            assert record["ok"] is False, name
            message = record["error"]
            assert isinstance(message, str) and message.strip(), name
            assert "\n" not in message.strip(), (name, message)
            assert re.search(want.error, message, re.IGNORECASE), (name, message)
            assert not record.get("outputs"), (name, record.get("outputs"))
            assert Path(name).name in message, (name, message)  # the message names the file
            # one line on stderr for each failed input, naming it
            assert any(Path(name).name in line for line in result.stderr.splitlines()), (name, result.stderr)

    # the overlay of an EXIF-rotated JPEG is upright: its size is the stored pixels' size swapped
    with Image.open(corpus / "exif6.jpg") as stored:
        assert stored.size == (96, 64)
    assert _overlay_size(Path(by_name["exif6.jpg"]["outputs"][0])) == (64, 96)
    # unicode and spaces survive into the output names
    assert any("chat été 猫" in Path(p).name for p in by_name["chat été 猫.png"]["outputs"])
    assert any("with space" in Path(p).name for p in by_name["with space.jpg"]["outputs"])

    assert result.code == 1, result.stderr
    assert _summary(result.stderr) == (len(good), len(expect), len(bad))
    # the scan did not write into the corpus
    assert not any(p.name.endswith(".gradcam.png") for p in corpus.rglob("*") if not p.is_symlink())


def test_max_pixels_is_checked_from_the_header(run_cli, tmp_path, one_thread):
    folder = tmp_path / "sizes"
    write_image(folder / "big.png", 200, 100, seed=1)  # 20,000 pixels: above 10,000
    write_image(folder / "edge.png", 100, 100, seed=2)  # exactly 10,000: allowed
    result = run_cli("explain", str(folder), *TINY, "-o", str(tmp_path / "out"), "--max-pixels", "10000")
    _assert_clean_stderr(result.stderr)
    records = {Path(r["input"]).name: r for r in result.records()}
    assert set(records) == {"big.png", "edge.png"}
    assert records["edge.png"]["ok"] is True
    assert records["big.png"]["ok"] is False
    assert re.search(r"200x100.*20,000 pixels.*--max-pixels 10,000", records["big.png"]["error"])
    assert result.code == 1
    assert _summary(result.stderr) == (1, 2, 1)

    # the same big file passes when the limit is off
    result = run_cli("explain", str(folder / "big.png"), *TINY, "-o", str(tmp_path / "out0"), "--max-pixels", "0")
    assert result.code == 0, result.stderr
    assert result.records()[0]["ok"] is True


def test_leading_dash_file_after_double_dash(run_cli, tmp_path, monkeypatch, one_thread):
    write_image(tmp_path / "-dash.png", 36, 28, seed=3)
    write_image(tmp_path / "plain.png", 30, 20, seed=4)
    monkeypatch.chdir(tmp_path)
    result = run_cli("explain", *TINY, "-o", "out", "--", "-dash.png", "plain.png")
    _assert_clean_stderr(result.stderr)
    assert result.code == 0, result.stderr
    records = result.records()
    assert [r["input"] for r in records] == ["-dash.png", "plain.png"]
    overlay = Path(records[0]["outputs"][0])
    assert overlay.is_file() and overlay.resolve().parent == (tmp_path / "out").resolve()
    assert _overlay_size(overlay) == (36, 28)


def test_a_directory_named_like_an_image_given_directly_is_scanned_not_read(run_cli, tmp_path, one_thread):
    write_image(tmp_path / "dir.jpg" / "inside.png", 32, 24, seed=5)
    result = run_cli("explain", str(tmp_path / "dir.jpg"), *TINY, "-o", str(tmp_path / "out"))
    _assert_clean_stderr(result.stderr)
    assert result.code == 0, result.stderr
    assert [Path(r["input"]).name for r in result.records()] == ["inside.png"]


def test_hostile_paths_on_stdin(run_cli, tmp_path, one_thread):
    folder = tmp_path / "s"
    write_image(folder / "chat été 猫.png", 44, 33, seed=6)
    (folder / "empty.jpg").parent.mkdir(exist_ok=True)
    (folder / "empty.jpg").write_bytes(b"")
    lines = f"{folder / 'chat été 猫.png'}\n{folder / 'empty.jpg'}\n{folder / 'missing.png'}\n"
    result = run_cli("explain", "-", *TINY, "-o", str(tmp_path / "out"), stdin=lines)
    _assert_clean_stderr(result.stderr)
    records = result.records()
    assert [r["ok"] for r in records] == [True, False, False]
    assert "no such file" in records[2]["error"]
    assert result.code == 1
    assert _summary(result.stderr) == (1, 3, 2)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root reads chmod-000 files anyway")
def test_unreadable_file_is_an_error_record(run_cli, tmp_path, one_thread):
    folder = tmp_path / "perm"
    locked = write_image(folder / "locked.png", 40, 30, seed=7)
    write_image(folder / "open.png", 40, 30, seed=8)
    locked.chmod(0)
    try:
        result = run_cli("explain", str(folder), *TINY, "-o", str(tmp_path / "out"))
    finally:
        locked.chmod(0o644)
    _assert_clean_stderr(result.stderr)
    records = {Path(r["input"]).name: r for r in result.records()}
    assert records["open.png"]["ok"] is True
    assert records["locked.png"]["ok"] is False
    assert "permission denied" in records["locked.png"]["error"]
    assert result.code == 1


# ---------------------------------------------------------------- special files, bad paths, odd names

ROOT = Path(__file__).resolve().parents[1]


def _subprocess_cli(*args: str, stdin=None, timeout: float = 120):
    """The real CLI in its own process: a hang shows as a timeout, a signal reaches it as it would a user's."""
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "gradcam_cli", "explain", *args], stdin=stdin, capture_output=True, timeout=timeout, env=env
    )


def _lines(stdout: bytes) -> list[dict]:
    import json

    return [json.loads(line.decode("utf-8")) for line in stdout.splitlines() if line.strip()]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
@pytest.mark.slow
def test_a_named_pipe_never_blocks_the_run(tmp_path):
    """A FIFO named as an argument and one found in a scanned folder: error records, the others explained."""
    folder = tmp_path / "in"
    write_image(folder / "a.png", 40, 30, seed=1)
    os.mkfifo(folder / "pipe.jpg")  # found by the scan: it has an image suffix
    os.mkfifo(tmp_path / "named.png")
    write_image(tmp_path / "z.png", 40, 30, seed=2)
    done = _subprocess_cli(
        str(folder), str(tmp_path / "named.png"), str(tmp_path / "z.png"), *TINY, "-o", str(tmp_path / "out"), timeout=90
    )
    stderr = done.stderr.decode()
    _assert_clean_stderr(stderr)
    records = {Path(r["input"]).name: r for r in _lines(done.stdout)}
    assert set(records) == {"a.png", "pipe.jpg", "named.png", "z.png"}
    assert records["a.png"]["ok"] and records["z.png"]["ok"]
    for name in ("pipe.jpg", "named.png"):
        assert records[name]["ok"] is False and "named pipe (FIFO)" in records[name]["error"], records[name]
    assert done.returncode == 1


def test_bad_paths_each_get_a_record_and_the_rest_go_on(run_cli, tmp_path, one_thread):
    """A NUL byte and a name over 255 bytes, on stdin and as arguments, between good inputs."""
    write_image(tmp_path / "a.png", 40, 30, seed=1)
    write_image(tmp_path / "b.png", 40, 30, seed=2)
    long_name = "n" * 300 + ".png"
    stdin = f"a.png\nbad\0name.png\n{long_name}\nb.png\n"
    result = run_cli("explain", "-", *TINY, "-o", "out", stdin=stdin)
    _assert_clean_stderr(result.stderr)
    records = result.records()
    assert [r["ok"] for r in records] == [True, False, False, True]
    assert "NUL byte" in records[1]["error"] and "304 bytes" in records[2]["error"]
    assert all(len(r["error"]) < 300 for r in records[1:3]), "an offending path is cut in the message"
    assert result.code == 1

    arguments = run_cli("explain", "a.png", long_name, "b.png", *TINY, "-o", "out2")
    assert [r["ok"] for r in arguments.records()] == [True, False, True]
    assert arguments.code == 1


def test_a_path_list_with_a_byte_order_mark_and_crlf_lines(run_cli, tmp_path, one_thread):
    write_image(tmp_path / "a.png", 40, 30, seed=1)
    write_image(tmp_path / "b.png", 40, 30, seed=2)
    result = run_cli("explain", "-", *TINY, "-o", "out", stdin="\ufeffa.png\r\nb.png\r\n")
    assert result.code == 0, result.stderr
    assert [r["input"] for r in result.records()] == ["a.png", "b.png"]


@pytest.mark.slow
def test_stdin_without_newlines_stops_with_bounded_memory(tmp_path):
    """`gradcam explain - < /dev/zero`: one error record after a megabyte, no growth, no hang."""
    with open("/dev/zero", "rb") as zeros:
        done = _subprocess_cli("-", *TINY, "-o", str(tmp_path / "out"), stdin=zeros, timeout=90)
    stderr = done.stderr.decode()
    _assert_clean_stderr(stderr)
    (record,) = _lines(done.stdout)
    assert record["ok"] is False and "without a newline" in record["error"]
    assert done.returncode == 1


@pytest.mark.slow
def test_names_that_are_not_utf8_give_valid_utf8_json(tmp_path, one_thread):
    """Undecodable bytes of a name are written as \\xNN in the records; the output file keeps the real bytes."""
    folder = tmp_path / "raw"
    folder.mkdir()
    good = write_image(tmp_path / "seed.png", 40, 30, seed=3)
    name = b"caf\xe9 \xff.png"
    with open(os.fsencode(folder) + b"/" + name, "wb") as handle:
        handle.write(good.read_bytes())
    done = _subprocess_cli(str(folder), *TINY, "-o", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr.decode()
    for line in done.stdout.splitlines():
        line.decode("utf-8")  # strict: every line is valid UTF-8
    (record,) = _lines(done.stdout)
    assert record["input"].endswith("caf\\xe9 \\xff.png") and record["ok"]
    assert [os.fsencode(p.name) for p in pictures_in(tmp_path / "out")] == [name + b".gradcam.png"]
    assert (tmp_path / "out" / "records.jsonl").read_bytes() == done.stdout, "the records file is as valid as stdout"


def test_names_of_240_to_255_bytes_are_written(run_cli, tmp_path, one_thread):
    """The temporary name is short and fixed: whenever the final name fits, it does too."""
    source = write_image(tmp_path / ("y" * 239 + ".png"), 40, 30, seed=6)  # overlay name: 255 bytes exactly
    result = run_cli("explain", source.name, *TINY, "-o", "out")
    assert result.code == 0, result.stderr
    (overlay,) = result.records()[0]["outputs"]
    assert len(Path(overlay).name.encode()) == 255 and _overlay_size(Path(overlay)) == (40, 30)


def test_same_stem_different_suffix_get_names_of_their_own(run_cli, tmp_path, one_thread):
    """x.jpg and x.png: each output name is a function of the input path alone, so a later run agrees."""
    write_image(tmp_path / "x.jpg", 40, 30, seed=7)
    write_image(tmp_path / "x.png", 48, 30, seed=8)
    both = run_cli("explain", "x.jpg", "x.png", *TINY, "-o", "out")
    assert [Path(r["outputs"][0]).name for r in both.records()] == ["x.jpg.gradcam.png", "x.png.gradcam.png"]
    alone = run_cli("explain", "x.png", *TINY, "-o", "out", "--skip-existing")
    (record,) = alone.records()
    assert record["skipped"] and record["outputs"] == both.records()[1]["outputs"]


def test_one_file_named_every_way_has_one_output_name(run_cli, tmp_path, one_thread):
    """Relative, ./, absolute, ../ from a sub-folder, folder scan, glob and stdin: all the same output path."""
    image = write_image(tmp_path / "photos" / "cat.png", 40, 30, seed=9)
    out = (tmp_path / "out").resolve()
    expected = out / "photos" / "cat.png.gradcam.png"
    ways = [("photos/cat.png",), ("./photos/cat.png",), (str(image),), ("photos",), ("photos/*.png",), ("-",)]
    for way in ways:
        result = run_cli("explain", *way, *TINY, "-o", str(out), stdin="photos/cat.png\n")
        (record,) = result.records()
        assert Path(record["outputs"][0]) == expected, way


def test_output_folder_inside_the_input_tree_with_globs_and_stdin(run_cli, tmp_path, one_thread):
    """Re-runs never read our own outputs back, never fail on them, never nest deeper."""
    write_image(tmp_path / "data" / "a.png", 40, 30, seed=10)
    write_image(tmp_path / "data" / "sub" / "b.png", 40, 30, seed=11)
    for _ in range(3):
        listing = "".join(f"{p.relative_to(tmp_path)}\n" for p in sorted((tmp_path / "data").rglob("*.png")))
        piped = run_cli("explain", "-", *TINY, "-o", "data/out", stdin=listing)
        globbed = run_cli("explain", "data/**/*.png", *TINY, "-o", "data/out")
        for result in (piped, globbed):
            assert result.code == 0, result.stderr
            assert sorted(Path(r["input"]).name for r in result.records()) == ["a.png", "b.png"]
    written = sorted(p.relative_to(tmp_path / "data" / "out").as_posix() for p in (tmp_path / "data" / "out").rglob("*.png"))
    assert written == ["data/a.png.gradcam.png", "data/sub/b.png.gradcam.png"]
    assert "gradcam outputs" in globbed.stderr and "skipped" in globbed.stderr


def test_an_unreadable_sub_folder_is_reported(run_cli, tmp_path, monkeypatch, one_thread):
    """Tests run as root, who reads any folder: the refusal is made by the OS call the scan uses."""
    write_image(tmp_path / "d" / "a.png", 40, 30, seed=12)
    write_image(tmp_path / "d" / "locked" / "b.png", 40, 30, seed=13)
    real_scandir = os.scandir
    locked = str(tmp_path / "d" / "locked")

    def scandir(path="."):
        if os.fspath(path) in (locked, "d/locked"):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    result = run_cli("explain", "d", "-r", *TINY, "-o", "out")
    records = result.records()
    assert [r["ok"] for r in records] == [True, False]
    assert "cannot read this folder" in records[1]["error"] and "Permission denied" in records[1]["error"]
    assert "locked" in records[1]["input"]
    assert result.code == 1


def test_sub_folders_left_out_without_r_are_counted(run_cli, tmp_path, one_thread):
    write_image(tmp_path / "d" / "a.png", 40, 30, seed=14)
    for name in ("one", "two"):
        write_image(tmp_path / "d" / name / "b.png", 40, 30, seed=15)
    result = run_cli("explain", "d", *TINY, "-o", "out")
    assert result.code == 0 and len(result.records()) == 1
    assert re.search(r"d: 2 sub-folders not scanned .*add -r to recurse", result.stderr), result.stderr
