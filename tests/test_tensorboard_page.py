"""The README's TensorBoard picture is a real page: tools/tensorboard_screenshot.py trains a little, logs the maps,
starts tensorboard on 127.0.0.1, photographs its dashboard in headless Chromium and always stops the server."""

from __future__ import annotations

import importlib.util
import os
import sys
import urllib.request
from pathlib import Path
from types import ModuleType

import pytest
from browser import chromium_path
from conftest import ROOT, require

require("tensorboard")
require("playwright")


def screenshot_script() -> ModuleType:
    """tools/tensorboard_screenshot.py (not a package module), imported by path once (its dataclasses need it in sys.modules)."""
    if "tensorboard_screenshot" in sys.modules:
        return sys.modules["tensorboard_screenshot"]
    spec = importlib.util.spec_from_file_location("tensorboard_screenshot", ROOT / "tools" / "tensorboard_screenshot.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
def test_the_picture_shows_the_logged_maps_from_a_real_server_that_is_stopped_afterwards(tmp_path: Path) -> None:
    tool = screenshot_script()
    chromium_path()  # skips (fails under CI) without Debian's chromium
    logdir, out = tmp_path / "logs", tmp_path / "page.jpg"
    assert tool.train_and_log(logdir, steps=4, every=2, batch=8) == [0, 2, 4]
    with tool.serving(logdir) as server:
        assert server.url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(server.url + "data/runs", timeout=10) as answer:
            assert answer.status == 200 and b"shapes" in answer.read()
        page = tool.photograph(server.url, out, width=1500, height=1400)
    assert server.process.poll() is not None and not alive(server.process.pid)
    assert page.rendered >= 2 * len(tool.IMAGES)  # each map pinned at the first step and shown at the last
    for path in tool.IMAGES:  # the tag log_cams gives (TAG/IMAGE/CLASS), drawn at the first and the last step
        tag = f"gradcam/{path.stem}/{path.stem.split('_')[0]}"
        assert {(tag, "Step 0", True), (tag, "Step 4", True)} <= set(page.cards), page.cards
    assert "train\n/loss" in page.text or "train/loss" in page.text
    assert page.refused == []  # nothing but 127.0.0.1 was asked for
    from PIL import Image

    with Image.open(out) as picture:
        assert picture.format == "JPEG" and picture.size == (1500, 1400)
        assert len(picture.getcolors(1 << 20) or range(10_000)) > 1000  # a drawn page, not a blank one


@pytest.mark.slow
def test_the_server_is_stopped_when_the_work_inside_fails(tmp_path: Path) -> None:
    tool = screenshot_script()
    tool.train_and_log(tmp_path / "logs", steps=1, every=1, batch=4)
    with pytest.raises(RuntimeError, match="inside"), tool.serving(tmp_path / "logs") as server:
        raise RuntimeError("inside")
    assert server.process.poll() is not None and not alive(server.process.pid)
