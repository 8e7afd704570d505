"""What a person sees: the real CLI on a pseudo-terminal (human lines, the progress bar), and in a shell pipe.

The in-process runner of conftest hands the CLI StringIO streams, which are
never terminals; these tests start `python -m gradcam_cli` with a pty (or a
pipe) as its stdout and stderr and look at the raw bytes that come out.
"""

from __future__ import annotations

import fcntl
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from PIL import Image

from conftest import EXAMPLES, ROOT, write_image

pytestmark = pytest.mark.slow  # real processes on pseudo-terminals and pipes

MODEL = (
    "--model",
    "test_resnet",
    "--weights",
    str(EXAMPLES / "shapes_model" / "shapes_test_resnet.safetensors"),
    "--labels",
    str(EXAMPLES / "shapes_model" / "labels.txt"),
)
ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07")


def _env() -> dict[str, str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "TERM": "xterm-256color", "COLUMNS": "160"}
    for name in ("TTY_INTERACTIVE", "TTY_COMPATIBLE", "FORCE_COLOR"):  # rich would obey these over the pty
        env.pop(name, None)
    return env


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "gradcam_cli", "explain", *args]


def in_terminal(cwd: Path, *args: str, stdin: str | None = None, timeout: float = 240) -> tuple[int, str]:
    """Run `gradcam explain ARGS` with a pseudo-terminal as stdout and stderr; its exit code and what it showed."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    process = subprocess.Popen(
        _command(*args),
        stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
        stdout=slave,
        stderr=slave,
        cwd=cwd,
        env=_env(),
        start_new_session=True,
    )
    os.close(slave)
    if process.stdin is not None:
        process.stdin.write((stdin or "").encode())
        process.stdin.close()
    chunks, deadline = [], time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                process.kill()
                raise AssertionError(f"no end after {timeout} s; the terminal showed:\n{b''.join(chunks).decode(errors='replace')}")
            if not select.select([master], [], [], min(left, 1.0))[0]:
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every process holding the terminal has closed it
                break
            if not data:
                break
            chunks.append(data)
        code = process.wait(timeout=60)
    finally:
        os.close(master)
    return code, ANSI.sub("", b"".join(chunks).decode("utf-8", "replace"))


def screen_lines(text: str) -> list[str]:
    """The lines as written, each progress redraw (a carriage return) counted as a line of its own."""
    return [line.strip() for line in re.split(r"\r\n|\n|\r", text) if line.strip()]


def _photos(tmp_path: Path, count: int) -> Path:
    for i in range(count):
        write_image(tmp_path / "imgs" / f"p{i}.png", 96, 64, seed=40 + i)
    return tmp_path / "imgs"


def test_a_run_and_its_resume_on_a_terminal(tmp_path):
    _photos(tmp_path, 3)
    code, shown = in_terminal(tmp_path, "imgs", "nothere.jpg", *MODEL, "-o", "out", "-b", "2")
    assert code == 1, shown
    lines = screen_lines(shown)
    assert "Traceback" not in shown and "internal error" not in shown
    assert len([line for line in lines if line.startswith("✓ imgs/p")]) == 3, shown
    # the failure: once, as its own line, the path once (not also a warning, not `nothere.jpg: nothere.jpg:`)
    assert [line for line in lines if line.startswith("✗")] == ["✗ nothere.jpg: no such file or folder"], shown
    assert shown.count("nothere.jpg") == 1, shown
    assert re.search(r"\b[0-4]/4\b", shown), "the progress shows N/M with the total counted before the run"
    assert "explained 3 of 4 images, 1 failed" in shown

    code, shown = in_terminal(tmp_path, "imgs", *MODEL, "-o", "out", "-b", "2", "--skip-existing")
    assert code == 0, shown
    assert "Traceback" not in shown and "internal error" not in shown
    skipped = [line for line in screen_lines(shown) if line.startswith("↷ ")]
    assert len(skipped) == 3, shown
    for line in skipped:
        assert re.fullmatch(r"↷ imgs/p\d\.png: skipped, outputs exist \(.+\.png\)", line), line
        assert (tmp_path / line.split("(", 1)[1].rstrip(")")).is_file()
    assert re.search(r"\b[0-3]/3\b", shown)
    assert "explained 0 of 3 images, 3 skipped (outputs exist)" in shown


def test_paths_on_stdin_show_a_count_without_a_total(tmp_path):
    _photos(tmp_path, 2)
    code, shown = in_terminal(tmp_path, "-", *MODEL, "-o", "out", stdin="imgs/p0.png\nimgs/p1.png\n")
    assert code == 0, shown
    assert len([line for line in screen_lines(shown) if line.startswith("✓ imgs/p")]) == 2, shown
    assert "loading model" in shown and not re.search(r"\b\d+/2\b", shown), "how many paths come is not known"


def test_a_closed_stdout_stops_the_run_quietly_with_whole_files(tmp_path):
    count = 20
    for i in range(count):
        write_image(tmp_path / "imgs" / f"p{i:02d}.png", 320, 240, seed=60 + i)
    env = {key: value for key, value in _env().items() if key != "TERM"}
    process = subprocess.Popen(
        _command("imgs", *MODEL, "-o", "out", "-b", "1", "--workers", "1", "--json"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
        env=env,
    )
    assert process.stdout is not None and process.stderr is not None
    first = process.stdout.readline()  # like `| head -1`: one record read, then the reader goes away
    process.stdout.close()
    stderr = process.stderr.read().decode("utf-8", "replace")
    code = process.wait(timeout=240)
    assert b'"ok": true' in first
    assert code == 141, stderr  # 128 + SIGPIPE, as a shell reports for `yes | head -1`
    assert "Traceback" not in stderr and "internal error" not in stderr and "Exception ignored" not in stderr, stderr
    assert stderr.strip() == "", "a closed stdout is no error worth a line"
    written = sorted((tmp_path / "out").rglob("*.png"))
    assert 1 <= len(written) < count, "the run stopped early"
    for path in written:  # every overlay there is whole
        with Image.open(path) as image:
            image.load()
    assert not [p for p in (tmp_path / "out").rglob("*") if p.name.startswith(".")], "no temporary file is left"
