"""What a run says before it starts, per-target flags, and resume that never trusts an incomplete file."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path, PurePath

import numpy as np
import pytest

from conftest import EXAMPLE_MODEL, pictures_in, write_image

SHAPES = (*EXAMPLE_MODEL, "--json")
TINY = ("-m", "test_resnet", "--no-pretrained", "--json")


def test_topk_above_the_class_count_is_said_once_and_resume_still_skips(run_cli, tmp_path, one_thread):
    for i in range(3):
        write_image(tmp_path / f"{i}.png", 48, 40, seed=i)
    first = run_cli("explain", "0.png", "1.png", "2.png", *SHAPES, "--topk", "9", "-o", "out")
    assert first.code == 0, first.stderr
    assert first.stderr.count("--topk 9: the model has only 4 classes; explaining all 4") == 1
    assert all(len(r["targets"]) == 4 for r in first.records())
    again = run_cli("explain", "0.png", "1.png", "2.png", *SHAPES, "--topk", "9", "-o", "out", "--skip-existing")
    assert again.code == 0, again.stderr
    assert [r["skipped"] for r in again.records()] == [True, True, True]
    assert all(len(r["outputs"]) == 4 for r in again.records())


def test_no_pretrained_says_once_that_the_maps_mean_nothing(run_cli, tmp_path, one_thread):
    write_image(tmp_path / "a.png", 40, 30, seed=1)
    write_image(tmp_path / "b.png", 40, 30, seed=2)
    result = run_cli("explain", "a.png", "b.png", *TINY, "-o", "out")
    assert result.code == 0, result.stderr
    assert result.stderr.count("--no-pretrained: random (seeded) weights; the classes and maps mean nothing") == 1
    trained = run_cli("explain", "a.png", *SHAPES, "-o", "out2")
    assert "mean nothing" not in trained.stderr


@pytest.mark.slow
def test_a_gradient_free_method_says_its_cost_before_it_starts(tmp_path, one_thread):
    write_image(tmp_path / "a.png", 40, 30, seed=3)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    process = subprocess.Popen(
        [sys.executable, "-m", "gradcam_cli", "explain", "a.png", *TINY, "--method", "scorecam", "-o", "out"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    (line,) = [line for line in stderr.splitlines() if "masked forwards per image" in line]
    assert "scorecam runs 96 masked forwards per image (layer4: 96 channels)" in line  # test_resnet's last stage
    assert "per image on cpu" in line and "--method gradcam" in line and "fewer channels" in line


def test_each_target_has_its_own_blank_flag():
    """--topk 2 with only the second map blank: the first target, and so the top-level fields, are not blank."""
    import torch

    from gradcam_cli.maps import CamBatch
    from gradcam_cli.outputs.naming import OutputNamer
    from gradcam_cli.geometry import Geometry
    from gradcam_cli.outputs.writer import ResultWriter

    out = Path("out")
    writer = ResultWriter(
        OutputNamer(out, "gradcam", 9), None, {"model": "m", "layers": ["layer4"], "method": "gradcam", "device": "cpu", "settings": {}}
    )
    maps = torch.zeros(1, 2, 8, 8)
    maps[0, 0, 2:5, 2:5] = 1.0
    cams = CamBatch(
        maps=maps,
        blank=torch.tensor([[False, True]]),
        finite=torch.tensor([True]),
        logits=torch.arange(10.0)[None],
        targets=torch.tensor([[9, 8]]),
    )
    geometry = Geometry((8, 8), (8, 8), (8, 8), (0, 0), (0.0, 0.0, 8.0, 8.0))
    record = writer.finish(Path("x.png"), np.zeros((8, 8, 3), np.uint8), geometry, cams, 0, PurePath("x.png"))
    assert [t.blank for t in record.targets] == [False, True]
    assert record.blank is False and record.class_index == 9
    (remark,) = record.remarks()
    assert remark.startswith("x.png: the map for class 8 is blank") and "class 9" not in remark

    from gradcam_cli.cli.console import human_line as _human_line

    assert _human_line(record).endswith("(blank map for class 8: try another --layer or --class)")


# ---------------------------------------------------------------- resume


def _outputs(out: Path) -> dict[str, Path]:
    return {p.name: p for p in pictures_in(out)}


@pytest.mark.parametrize("damage", ["zero-byte png", "truncated png", "missing npy", "truncated npy"])
def test_skip_existing_redoes_an_image_whose_outputs_are_not_all_whole(run_cli, tmp_path, one_thread, damage):
    write_image(tmp_path / "a.png", 48, 40, seed=4)
    write_image(tmp_path / "b.png", 48, 40, seed=5)
    args = ("explain", "a.png", "b.png", *SHAPES, "--topk", "2", "--save-raw", "-o", "out", "--skip-existing")
    first = run_cli(*args)
    assert first.code == 0, first.stderr
    files = _outputs(tmp_path / "out")
    assert len(files) == 8  # 2 images x 2 classes x (overlay + .npy)
    victim = sorted(n for n in files if n.startswith("a.png") and n.endswith(".npy" if "npy" in damage else ".png"))[0]
    whole = files[victim].read_bytes()
    if damage == "zero-byte png":
        files[victim].write_bytes(b"")
    elif damage.startswith("truncated"):
        files[victim].write_bytes(whole[: len(whole) - 7])
    else:
        files[victim].unlink()
    again = run_cli(*args)
    assert again.code == 0, again.stderr
    assert [r["skipped"] for r in again.records()] == [False, True], damage
    # whole again; the values agree up to float rounding (the image now runs in a batch of one, not two)
    from gradcam_cli.outputs.files import is_complete

    assert is_complete(files[victim])
    if victim.endswith(".npy"):
        np.testing.assert_allclose(np.load(files[victim]), np.load(io.BytesIO(whole)), atol=1e-4)


@pytest.mark.slow
def test_a_killed_runs_temporary_files_are_cleared_and_only_ours(run_cli, tmp_path, one_thread):
    write_image(tmp_path / "a.png", 40, 30, seed=6)
    out = tmp_path / "out"
    out.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    ours_dead = out / f".gradcam-tmp-{int(dead.stdout)}-0123abcd.part"
    ours_alive = out / f".gradcam-tmp-{os.getppid()}-0123abcd.part"  # a live process: a run writing right now
    foreign = out / ".a.png.gradcam.png.x1y2z3.part"
    for path in (ours_dead, ours_alive, foreign):
        path.write_bytes(b"partial")
    result = run_cli("explain", "a.png", *TINY, "-o", out)
    assert result.code == 0, result.stderr
    assert not ours_dead.exists() and ours_alive.exists() and foreign.exists()


def test_files_are_written_whole_under_a_short_temporary_name(tmp_path, monkeypatch):
    """fsync before rename, and a temporary name of fixed length in the same folder."""
    from gradcam_cli.outputs import files as images

    calls: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (calls.append(f"replace {Path(a).name}"), real_replace(a, b))[1])
    target = tmp_path / ("z" * 255)
    images.write_atomic(target, b"data")
    assert target.read_bytes() == b"data" and calls[0] == "fsync" and calls[1].startswith("replace .gradcam-tmp-")
    assert len(calls[1]) - len("replace ") < 40


def test_a_signal_after_the_last_image_says_nothing_is_left_to_do(run_cli, tmp_path, one_thread, monkeypatch):
    """Ctrl-C as the last file is written: the run stops (exit 130), but no line sends the user to do "the rest"."""
    import json
    import signal

    from gradcam_cli.run.pipeline import Explainer

    for i in range(2):
        write_image(tmp_path / f"{i}.png", 40, 30, seed=i)
    explain = Explainer.run

    def then_ctrl_c(self, sources, emit):  # the real run, then a real SIGINT once every input is done
        summary = explain(self, sources, emit)
        os.kill(os.getpid(), signal.SIGINT)
        return summary

    monkeypatch.setattr(Explainer, "run", then_ctrl_c)
    result = run_cli("explain", "0.png", "1.png", *TINY, "-o", "out")
    assert result.code == 130, result.stderr
    assert [r["ok"] for r in result.records()] == [True, True]
    (line,) = [line for line in result.stderr.splitlines() if "interrupted" in line]
    assert "after the last image" in line and "nothing is left to do" in line and "--skip-existing" not in line, line
    finished = json.loads((tmp_path / "out" / "runs.jsonl").read_text().splitlines()[-1])
    assert finished["interrupted"] is False and finished["counts"]["done"] == 2, "the run's account: it did everything"
