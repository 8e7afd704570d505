"""`gradcam eval` on a segmenter: a unit per region, every map set explaining the same regions, its own measures."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from test_segmenters import NETS, SIZE


@pytest.fixture
def scenes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The constructed segmenters (tests/test_segmenters.py) and four 64x64 pictures: a red and a green square each."""
    (tmp_path / "nets.py").write_text(NETS)
    (tmp_path / "in").mkdir()
    rng = np.random.default_rng(3)
    for i in range(4):
        picture = np.zeros((64, 64, 3), np.uint8)
        for channel in (0, 1):
            y, x = rng.integers(0, 44, 2)
            picture[y : y + 20, x : x + 20, channel] = 255
        Image.fromarray(picture).save(tmp_path / "in" / f"scene{i}.png")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_eval_measures_each_region_against_the_baselines(run_cli, scenes) -> None:
    result = run_cli("eval", "in", "--model", "nets.py:Colours", *SIZE, "--methods", "hirescam,gradcam", "--metrics",
                     "deletion,insertion,energy,pointing", "--class", "1", "--class", "2", "-o", "out", "--report")  # fmt: skip
    assert result.code == 0, result.stderr
    records = [json.loads(line) for line in (scenes / "out" / "records.jsonl").read_text().splitlines()]
    hirescam = [r for r in records if r["method"] == "hirescam"]
    assert len(hirescam) == 8 and {r["segment"] for r in hirescam} == {0, 1} and {r["region"] for r in hirescam} == {"predicted"}
    assert all(r["metrics"]["energy_in_region"] > 0.8 and r["metrics"]["pointing"] == 1.0 for r in hirescam)
    assert all(Path(r["targets"][0]["overlay"]).name.endswith(f".hirescam.seg{r['segment']}.png") for r in hirescam)
    random = [r["metrics"]["energy_in_region"] for r in records if r["method"] == "random"]
    assert np.mean(random) < 0.3  # a region of a sixth of the picture holds about that share of a random map's energy
    summary = json.loads((scenes / "out" / "eval.json").read_text())
    assert summary["unit"] == "region" and "energy_in_region" in summary["measures"] and "energy_in_box" not in summary["measures"]
    deletion = {r["method"]: r["metrics"]["deletion"] for r in records if r["segment"] == 0 and r["input"].endswith("scene0.png")}
    assert deletion["hirescam"] < deletion["random"]  # taking the region's evidence away first lowers its probability faster
