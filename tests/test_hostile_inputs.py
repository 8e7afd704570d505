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

from conftest import write_image

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
    return (
        b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr) + _png_chunk(b"IDAT", zlib.compress(b"")) + _png_chunk(b"IEND", b"")
    )


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
