"""The pointing game on the shipped example model, run through the CLI.

Fresh scenes (a seed and sizes the model never trained on, non-square) go
through `gradcam explain` with the preset's defaults; the hottest pixel of each
raw map, at the original resolution, must fall within 15 px of the shape's box.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import EXAMPLES, ROOT, call_cli

pytestmark = pytest.mark.slow  # dozens of scenes through the CLI

WEIGHTS = EXAMPLES / "shapes_model" / "shapes_test_resnet.safetensors"
LABELS = EXAMPLES / "shapes_model" / "labels.txt"
TOLERANCE_PX = 15
REQUIRED_HIT_RATE = 0.85
SIZES = [(320, 240), (240, 320), (400, 260), (288, 352)]
SCENES = 48


def _shapes():
    sys.path.insert(0, str(EXAMPLES))
    try:
        import shapes
    finally:
        sys.path.remove(str(EXAMPLES))
    return shapes


def _distance_to_box(x: int, y: int, box: tuple[int, int, int, int]) -> float:
    """Pixels from (x, y) to make_scene's box, whose x1 and y1 are exclusive (the last pixel is x1-1, y1-1); 0 inside."""
    x0, y0, x1, y1 = box
    dx = max(x0 - x, 0, x - (x1 - 1))
    dy = max(y0 - y, 0, y - (y1 - 1))
    return float(np.hypot(dx, dy))


@pytest.fixture(scope="module")
def scenes(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, tuple]]:
    shapes = _shapes()
    folder = tmp_path_factory.mktemp("scenes")
    rng = np.random.default_rng(20261130)  # not a training seed
    truth = {}
    for i in range(SCENES):
        width, height = SIZES[i % len(SIZES)]
        image, label, box = shapes.make_scene(rng, width, height)
        name = f"scene_{i:03d}.png"
        image.save(folder / name)
        truth[name] = (label, box, (width, height))
    return folder, truth


@pytest.fixture(scope="module")
def explained(scenes, tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """One `gradcam explain` run over the scenes, with the preset's defaults and the raw maps: both tests read it."""
    folder, _ = scenes
    out = tmp_path_factory.mktemp("explained")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(out)  # where a user runs it: outputs mirror the inputs' paths from here
        result = call_cli("explain", folder, "--config", ROOT / "configs" / "shapes_example.yaml", "--save-raw", "--json", "-o", out)
    assert result.code == 0, result.stderr
    records = result.records()
    assert len(records) == SCENES
    return records


def test_pointing_game_through_the_cli(scenes, explained) -> None:
    _, truth = scenes
    hits, correct = 0, 0
    for record in explained:
        label, box, (width, height) = truth[Path(record["input"]).name]
        raw = np.load(record["targets"][0]["raw"])
        assert raw.shape == (height, width) and raw.dtype == np.float32
        assert np.isfinite(raw).all() and 0.0 <= raw.min() and raw.max() <= 1.0
        y, x = np.unravel_index(int(np.argmax(raw)), raw.shape)
        hits += _distance_to_box(int(x), int(y), box) <= TOLERANCE_PX
        correct += record["class_index"] == label
    rate = hits / SCENES
    print(f"pointing game: {hits}/{SCENES} = {rate:.1%} within {TOLERANCE_PX}px; accuracy {correct}/{SCENES}")
    assert rate >= REQUIRED_HIT_RATE


def test_the_example_model_classifies_fresh_scenes(scenes, explained) -> None:
    """The maps mean something only if the model does: most fresh scenes are classified right."""
    _, truth = scenes
    correct = sum(r["class_index"] == truth[Path(r["input"]).name][0] for r in explained)
    assert correct / len(explained) >= 0.85
    assert all(r["class_name"] in _shapes().CLASSES for r in explained)
