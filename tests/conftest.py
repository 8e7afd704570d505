"""Shared test fixtures: offline caches, small images, an in-process CLI runner."""
from __future__ import annotations

import io
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def pytest_configure(config: pytest.Config) -> None:
    """No test may reach a hub: offline, every cache an empty temporary folder, before any test module imports.

    huggingface_hub reads HF_HUB_OFFLINE when it is first imported, so this
    must run before collection imports timm or gradcam_cli, not in a fixture.
    """
    import shutil
    import tempfile

    cache = Path(tempfile.mkdtemp(prefix="gradcam-test-caches-"))
    config.add_cleanup(lambda: shutil.rmtree(cache, ignore_errors=True))
    for name, value in {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HOME": str(cache / "hf"),
        "TORCH_HOME": str(cache / "torch"),
        "XDG_CACHE_HOME": str(cache / "xdg"),
    }.items():
        os.environ[name] = value


@pytest.fixture(scope="session", autouse=True)
def seeded_torch() -> None:
    """The same random start for every run; two threads at most, as the machines that run the suite have."""
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(min(2, os.cpu_count() or 1))


@pytest.fixture(autouse=True)
def in_test_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test runs in its own folder, as a user runs gradcam where the images are.

    Output names mirror the input's path relative to the current folder, so
    `tmp_path / "cat.png"` gives `OUT/cat.png.gradcam.png` here.
    """
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def one_thread():
    """Tiny models gain nothing from threads, and on a busy 2-core box 2 threads spin for ages."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def seeded(seed: int, *shape: int):
    """A reproducible normal tensor that leaves the global RNG alone."""
    import torch

    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def write_image(path: Path, width: int = 96, height: int = 64, seed: int = 0, mode: str = "RGB") -> Path:
    """A small random photo-like image (smooth blobs, so resizing is meaningful)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, size=(max(2, height // 8), max(2, width // 8), 3), dtype=np.uint8)
    image = Image.fromarray(small).resize((width, height), Image.BILINEAR)
    path.parent.mkdir(parents=True, exist_ok=True)
    image.convert(mode).save(path)
    return path


@pytest.fixture
def image_dir(tmp_path: Path) -> Path:
    """Three readable images of different sizes in a folder (one in a sub-folder)."""
    folder = tmp_path / "photos"
    write_image(folder / "a.jpg", 120, 90, seed=1)
    write_image(folder / "b.png", 64, 96, seed=2)
    write_image(folder / "sub" / "c.png", 80, 80, seed=3)
    return folder


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str

    def records(self) -> list[dict]:
        import json

        return [json.loads(line) for line in self.stdout.splitlines() if line.strip()]


@pytest.fixture
def run_cli():
    """Run `gradcam ARGS` in this process (torch loads once) with captured streams."""
    from gradcam_cli.cli.app import main

    def run(*args: str, stdin: str = "") -> CliResult:
        out, err = io.StringIO(), io.StringIO()
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(sys, "stdin", io.StringIO(stdin))
            patch.setattr(sys, "stdout", out)
            patch.setattr(sys, "stderr", err)
            try:
                main([str(a) for a in args])
                code = 0
            except SystemExit as exit_:
                code = int(exit_.code or 0)
        return CliResult(code, out.getvalue(), err.getvalue())

    return run
