"""The Ray Data runner on one local cluster (two CPUs): the same files as one process, every input one record.

Skipped when `ray` is not installed (the `[ray]` extra; `.ci/run` installs it).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import png_bytes, require, write_photo_tree

ray = require("ray")
require("ray.data")
pytestmark = pytest.mark.slow  # a local Ray cluster for the module: its daemons and actors are processes

MODEL = ("--model", "test_resnet", "--no-pretrained")
COUNT = 10


@pytest.fixture(scope="module")
def cluster():
    """One local Ray cluster for the module: it starts in seconds, its actors in a few more."""
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    yield
    ray.shutdown()


@pytest.fixture
def photos(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder of photos and a subfolder; the current folder is their parent."""
    folder = write_photo_tree(tmp_path / "photos", COUNT, every=4)
    (folder / "broken.png").write_bytes(b"not a png")
    monkeypatch.chdir(tmp_path)
    return folder


def test_the_ray_runner_writes_what_one_process_writes(run_cli, cluster, photos: Path) -> None:
    on_ray = run_cli("explain", "photos", "-r", *MODEL, "--ray", "local", "-o", "ray", "--json")
    assert on_ray.code == 1, on_ray.stderr  # the broken file: one error record, the others explained
    plain = run_cli("explain", "photos", "-r", *MODEL, "-o", "one", "--json")
    records = on_ray.records()
    assert sorted(r["input"] for r in records) == sorted(r["input"] for r in plain.records())
    assert len({r["input"] for r in records}) == COUNT + 1 and sum(not r["ok"] for r in records) == 1
    kept = [json.loads(line) for line in (Path("ray") / "records.jsonl").read_text().splitlines()]
    assert sorted(r["input"] for r in kept) == sorted(r["input"] for r in records)
    assert png_bytes(Path("ray")) == png_bytes(Path("one")), "the same overlays, byte for byte"
    assert f"explained {COUNT} of {COUNT + 1} images, 1 failed" in on_ray.stderr
    run = [json.loads(line) for line in (Path("ray") / "runs.jsonl").read_text().splitlines()]
    assert run[0]["device"] == "ray local" and run[1]["counts"]["done"] == COUNT


def test_explain_dataset_from_python(cluster, photos: Path) -> None:
    import ray.data

    from gradcam_cli.run.ray_data import explain_dataset

    paths = sorted(str(p.relative_to(photos.parent)) for p in photos.rglob("img*.png"))
    records = explain_dataset(ray.data.from_items([{"path": p} for p in paths]), "test_resnet", actors=1, pretrained=False, output_dir="py")
    rows = [json.loads(row["record"]) for row in records.iter_rows()]
    assert sorted(r["input"] for r in rows) == paths and all(r["ok"] for r in rows)
    assert all(Path(r["outputs"][0]).is_file() and r["outputs"][0].startswith("py/photos/") for r in rows)


def test_without_ray_it_is_one_line(run_cli, photos: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray" or name.startswith("ray."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    result = run_cli("explain", "photos", "-r", *MODEL, "--ray", "local", "-o", "none")
    assert result.code == 2 and result.stderr.strip() == "gradcam: error: --ray needs Ray Data: pip install 'gradcam-cli[ray]'"
