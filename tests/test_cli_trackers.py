"""`gradcam explain` and `gradcam eval` with --tensorboard DIR and --wandb PROJECT, and a sweep of checkpoints (issue 27).

The trackers are read back as a user would read them: TensorBoard's event files with tensorboard's own reader, the
W&B run folder of an offline run. The sweep runs on three real Lightning checkpoints of a timm model trained here.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from conftest import EXAMPLE_MODEL, EXAMPLES, call_cli, require
from gradcam_cli.errors import UsageError
from gradcam_cli.inputs.checkpoints import swept_checkpoints
from gradcam_cli.integrations.trackers import pictures_of
from gradcam_cli.outputs.records import ImageRecord

require("tensorboard")

SCENES = sorted((EXAMPLES / "shapes_images").glob("*.jpg"))[:3]


def _events(folder: Path) -> Any:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder), size_guidance={"images": 0, "tensors": 0, "scalars": 0})
    events.Reload()
    return events


def _decoded(image_event: Any) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(image_event.encoded_image_string)).convert("RGB"))


def _text(events: Any, tag: str) -> list[tuple[int, str]]:
    return [(e.step, e.tensor_proto.string_val[0].decode()) for e in events.Tensors(f"{tag}/text_summary")]


def test_explain_sends_each_overlay_and_the_records_table_to_tensorboard(tmp_path: Path) -> None:
    out, board = tmp_path / "out", tmp_path / "board"
    result = call_cli("explain", *SCENES, *EXAMPLE_MODEL, "-o", out, "--tensorboard", board, "--json")
    assert result.code == 0, result.stderr
    records = result.records()
    events = _events(board)
    assert len(events.Tags()["images"]) == len(SCENES)
    for record in records:
        overlay = Path(record["outputs"][0])
        tag = overlay.relative_to(out).with_suffix("").as_posix()
        (logged,) = events.Images(tag)
        assert logged.step == 0
        assert np.array_equal(_decoded(logged), np.asarray(Image.open(overlay).convert("RGB")))  # the PNG itself, lossless
    ((step, table),) = _text(events, "records")
    assert step == 0
    for record in records:  # what W&B captions each overlay with
        (picture,) = pictures_of(ImageRecord.from_json(json.dumps(record)), out)
        assert picture.caption == f"{record['class_name']} p={record['probability']:.2f}"
    lines = table.splitlines()
    assert lines[0] == "| input | class | probability | score | blank | overlay |"  # a photo has no frame or slice
    assert len(lines) == 2 + len(SCENES)
    for record in records:
        assert any(record["input"] in line and f"| {record['class_name']} |" in line for line in lines[2:])


def test_a_volumes_montage_written_after_its_slices_records_is_logged_once(tmp_path: Path) -> None:
    nibabel = require("nibabel")
    volume = np.random.default_rng(0).normal(size=(32, 32, 4)).astype(np.float32)
    nibabel.save(nibabel.Nifti1Image(volume, np.eye(4)), str(tmp_path / "scan.nii.gz"))
    out, board = tmp_path / "out", tmp_path / "board"
    result = call_cli("explain", tmp_path / "scan.nii.gz", *EXAMPLE_MODEL, "--slices", "axial", "-o", out, "--tensorboard", board, "--json")
    assert result.code == 0, result.stderr
    events = _events(board)
    montage = next(Path(o) for o in result.records()[0]["outputs"] if o.endswith(".png"))
    (logged,) = events.Images(montage.relative_to(out).with_suffix("").as_posix())
    assert np.array_equal(_decoded(logged), np.asarray(Image.open(montage).convert("RGB")))
    ((_, table),) = _text(events, "records")
    assert len(table.splitlines()) == 2 + 4  # a row per slice


def test_eval_sends_the_metric_means_table_and_charts(tmp_path: Path) -> None:
    out, board = tmp_path / "ev", tmp_path / "board"
    args = ("eval", *SCENES, *EXAMPLE_MODEL, "-o", out, "--methods", "gradcam,layercam", "--metrics", "deletion,insertion")
    result = call_cli(*args, "--steps", "4", "--tensorboard", board, "--quiet", "--json")
    assert result.code == 0, result.stderr
    summary = json.loads((out / "eval.json").read_text())
    events = _events(board)
    for name, result_of in summary["results"].items():
        for measure in ("deletion", "insertion"):
            (scalar,) = events.Scalars(f"eval/{name}/{measure}")
            assert scalar.value == pytest.approx(result_of[measure]["mean"], rel=1e-6)  # stored as float32
    assert {"eval/chart/deletion", "eval/chart/insertion", "eval/chart/summary"} <= set(events.Tags()["images"])
    ((_, table),) = _text(events, "eval")
    rows = (out / "eval.csv").read_text().splitlines()
    assert len(table.splitlines()) == len(rows) + 1  # the CSV's header and rows, and Markdown's rule


@pytest.mark.slow  # wandb starts its service process
def test_wandb_offline_run_holds_the_overlays_and_records_table(offline_wandb: Path) -> None:
    tmp_path = offline_wandb
    result = call_cli("explain", *SCENES, *EXAMPLE_MODEL, "-o", tmp_path / "out", "--wandb", "shapes", "--json")
    assert result.code == 0, result.stderr
    (run,) = (tmp_path / "wandb").glob("offline-run-*")
    images = sorted((run / "files" / "media" / "images").rglob("*.png"))
    assert len(images) == len(SCENES)
    (table_file,) = (run / "files" / "media" / "table").glob("records_*.table.json")
    table = json.loads(table_file.read_text())
    assert table["columns"][:5] == ["input", "frame", "slice", "class", "probability"]
    assert sorted(row[0] for row in table["data"]) == sorted(r["input"] for r in result.records())


def test_a_tracker_that_cannot_start_is_named_once_and_the_files_are_written(tmp_path: Path) -> None:
    blocker = tmp_path / "board"
    blocker.write_text("a file where the event folder would be")
    result = call_cli("explain", *SCENES, *EXAMPLE_MODEL, "-o", tmp_path / "out", "--tensorboard", blocker, "--json")
    assert result.code == 0, result.stderr
    said = [line for line in result.stderr.splitlines() if "--tensorboard" in line]
    assert len(said) == 1 and "cannot start" in said[0] and "written without it" in said[0], result.stderr
    assert len(result.records()) == len(SCENES) and all(Path(r["outputs"][0]).is_file() for r in result.records())


def test_a_tracker_failing_mid_run_is_named_once_and_dropped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gradcam_cli.integrations import trackers

    calls: list[int] = []
    real = trackers.TensorBoardBackend.pictures

    def fails_second_time(self: Any, pictures: Any, step: int) -> None:
        calls.append(step)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real(self, pictures, step)

    monkeypatch.setattr(trackers.TensorBoardBackend, "pictures", fails_second_time)
    board = tmp_path / "board"
    result = call_cli("explain", *SCENES, *EXAMPLE_MODEL, "-o", tmp_path / "out", "--tensorboard", board, "--json", "--batch-size", "1")
    assert result.code == 0, result.stderr
    said = [line for line in result.stderr.splitlines() if "--tensorboard" in line]
    assert len(said) == 1 and "stopped logging (" in said[0] and "No space left on device" in said[0], result.stderr
    assert len(calls) == 2  # dropped: never called again
    assert len(result.records()) == len(SCENES) and all(Path(r["outputs"][0]).is_file() for r in result.records())
    assert len(_events(board).Tags()["images"]) == 1  # what it logged before it failed stays


def test_a_missing_tracker_library_is_one_line_before_the_model_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    result = call_cli("explain", *SCENES, "-m", "no_such_model_at_all", "-o", tmp_path / "out", "--wandb", "p")
    assert result.code == 2
    assert result.stderr.strip().splitlines() == [
        "gradcam: error: --wandb logs to Weights & Biases, which is not installed: pip install 'gradcam-cli[wandb]'"
    ]


# ---- checkpoint sweeps ----


@pytest.mark.parametrize(
    ("names", "steps"),
    [
        (["epoch=0-step=4.ckpt", "epoch=1-step=8.ckpt", "epoch=2-step=12.ckpt"], [4, 8, 12]),
        (["epoch=10.ckpt", "epoch=9.ckpt"], [9, 10]),
        (["ckpt_300.pt", "ckpt_1200.pt", "ckpt_50.pt"], [50, 300, 1200]),
        (["b.pt", "a.pt", "last.pt"], [0, 1, 2]),  # no numbers: the names' order
        (["epoch=1-step=8.ckpt", "epoch=1-step=8-v1.ckpt"], [0, 1]),  # two agree: numbered in order instead
    ],
)
def test_a_weights_pattern_names_checkpoints_ordered_by_their_step(tmp_path: Path, names: list[str], steps: list[int]) -> None:
    for name in names:
        (tmp_path / name).write_bytes(b"")
    sweep = swept_checkpoints(tmp_path / f"*{Path(names[0]).suffix}")
    assert sweep is not None
    assert [c.step for c in sweep] == steps
    assert sorted(c.path.name for c in sweep) == sorted(names)
    assert all(c.folder == c.path.stem for c in sweep)


def test_a_plain_path_or_a_file_named_like_a_pattern_is_no_sweep(tmp_path: Path) -> None:
    odd = tmp_path / "weights[1].pt"
    odd.write_bytes(b"")
    assert swept_checkpoints(odd) is None
    assert swept_checkpoints(tmp_path / "model.pt") is None
    assert swept_checkpoints(None) is None
    with pytest.raises(UsageError, match="the pattern names no file"):
        swept_checkpoints(tmp_path / "ckpts" / "*.ckpt")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three Lightning checkpoints (one an epoch) of a timm test_resnet trained here on shapes scenes."""
    lightning = require("lightning")
    import timm
    import torch
    from torch import nn

    from test_training_callbacks import _data

    class Wrapped(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = timm.create_model("test_resnet", pretrained=False, num_classes=4)

        def training_step(self, batch: Any, _index: int) -> torch.Tensor:
            return nn.functional.cross_entropy(self.model(batch[0]), batch[1])

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.05)

    folder = tmp_path_factory.mktemp("ckpts")
    lightning.seed_everything(0, verbose=False)
    saver = lightning.pytorch.callbacks.ModelCheckpoint(dirpath=folder, save_top_k=-1, every_n_epochs=1)
    trainer = lightning.Trainer(
        accelerator="cpu", max_epochs=3, enable_progress_bar=False, enable_model_summary=False, logger=False, callbacks=[saver]
    )  # fmt: skip
    trainer.fit(Wrapped(), torch.utils.data.DataLoader(_data(16, 1), batch_size=8, shuffle=True))
    return folder


@pytest.mark.slow
def test_a_sweep_explains_each_checkpoint_as_a_step_with_the_maps_it_gives_alone(checkpoints: Path, tmp_path: Path) -> None:
    labels = str(EXAMPLES / "shapes_model" / "labels.txt")
    model = ("-m", "test_resnet", "--labels", labels, "--save-raw", "--json")
    out, board = tmp_path / "out", tmp_path / "board"
    result = call_cli("explain", *SCENES, *model, "--weights", checkpoints / "epoch=*.ckpt", "-o", out, "--tensorboard", board)
    assert result.code == 0, result.stderr
    names = ["epoch=0-step=2", "epoch=1-step=4", "epoch=2-step=6"]
    assert sorted(path.name for path in checkpoints.iterdir()) == [f"{name}.ckpt" for name in names]
    assert [line for line in result.stderr.splitlines() if "checkpoint " in line][0].startswith("gradcam: checkpoint 1 of 3: ")
    events = _events(board)
    assert len(events.Tags()["images"]) == len(SCENES)  # one tag per image, its map at each checkpoint's step
    for tag in events.Tags()["images"]:
        assert [event.step for event in events.Images(tag)] == [2, 4, 6]
    assert [step for step, _ in _text(events, "records")] == [2, 4, 6]
    records = result.records()
    assert len(records) == 3 * len(SCENES)
    for name in names:  # each checkpoint alone gives the same maps as in the sweep
        alone = call_cli("explain", *SCENES, *model, "--weights", checkpoints / f"{name}.ckpt", "-o", tmp_path / "alone" / name)
        assert alone.code == 0, alone.stderr
        for record in alone.records():
            raw = Path(record["targets"][0]["raw"])
            swept = out / name / raw.relative_to(tmp_path / "alone" / name)
            assert np.array_equal(np.load(raw), np.load(swept))
    first, last = (np.load(next((out / n).rglob("*.npy"))) for n in (names[0], names[-1]))
    assert not np.array_equal(first, last)  # training moved the map: the steps show different things


def test_a_sweep_refuses_stdin_in_one_line(tmp_path: Path) -> None:
    for step in (1, 2):
        (tmp_path / f"step={step}.ckpt").write_bytes(b"")
    result = call_cli("explain", "-", *EXAMPLE_MODEL[:2], "--weights", tmp_path / "*.ckpt", "-o", tmp_path, stdin=str(SCENES[0]))
    assert result.code == 2
    assert "reads the inputs once per checkpoint" in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_compare_lays_a_sweeps_checkpoints_out_as_rows(checkpoints: Path, tmp_path: Path) -> None:
    labels = str(EXAMPLES / "shapes_model" / "labels.txt")
    args = ("compare", SCENES[0], "-m", "test_resnet", "--labels", labels, "--methods", "gradcam,layercam", "--json")
    result = call_cli(*args, "--weights", checkpoints / "epoch=*.ckpt", "-o", tmp_path / "grid")
    assert result.code == 0, result.stderr
    (record,) = result.records()
    assert record["down"] == "checkpoints" and record["rows"] == ["epoch=0-step=2", "epoch=1-step=4", "epoch=2-step=6"]
    assert {cell["layer"] for cell in record["cells"]} == {"layer4"}  # the model's default layer, as explain takes it
    assert [cell["step"] for cell in record["cells"] if cell["col"] == 0] == [2, 4, 6]
    last = call_cli("explain", SCENES[0], "-m", "test_resnet", "--labels", labels, "--weights", checkpoints / "epoch=2-step=6.ckpt",
                    "-o", tmp_path / "last", "--json").records()[0]  # fmt: skip
    assert record["class_index"] == last["class_index"]  # every cell explains the last checkpoint's class
    grid = np.asarray(Image.open(record["output"]).convert("RGB"))
    overlay = np.asarray(Image.open(last["outputs"][0]).convert("RGB"))
    cell = next(c for c in record["cells"] if c["row"] == 2 and c["col"] == 0)
    x, y, w, h = cell["box"]
    shown = np.asarray(Image.fromarray(overlay).resize((w, h), Image.Resampling.BILINEAR)) if overlay.shape[:2] != (h, w) else overlay
    assert np.abs(grid[y : y + h, x : x + w].astype(int) - shown.astype(int)).mean() < 3  # the cell is that checkpoint's overlay
    several = call_cli(*args, "--weights", checkpoints / "*.ckpt", "--layers", "layer3,layer4", "-o", tmp_path / "no")
    assert several.code == 2 and "give one in --layers" in several.stderr


@pytest.mark.slow
def test_eval_over_a_sweep_logs_each_checkpoints_means_at_its_step(checkpoints: Path, tmp_path: Path) -> None:
    labels = str(EXAMPLES / "shapes_model" / "labels.txt")
    out, board = tmp_path / "ev", tmp_path / "board"
    args = ("eval", *SCENES[:2], "-m", "test_resnet", "--labels", labels, "--methods", "gradcam", "--metrics", "deletion")
    result = call_cli(*args, "--steps", "4", "--weights", checkpoints / "*.ckpt", "-o", out, "--tensorboard", board, "--json")
    assert result.code == 0, result.stderr
    scalars = _events(board).Scalars("eval/gradcam/deletion")
    assert [s.step for s in scalars] == [2, 4, 6]
    for scalar, name in zip(scalars, ["epoch=0-step=2", "epoch=1-step=4", "epoch=2-step=6"]):
        summary = json.loads((out / name / "eval.json").read_text())
        assert scalar.value == pytest.approx(summary["results"]["gradcam"]["deletion"]["mean"], rel=1e-6)


@pytest.mark.slow  # wandb starts its service process
def test_a_videos_overlay_goes_to_wandb_as_a_video_once_whole_and_its_frames_to_the_table(offline_wandb: Path) -> None:
    require("av")
    from test_video import moving_clip

    video = offline_wandb / "clips" / "shape.mp4"
    moving_clip(video, seed=101, frames=6)
    out, board = offline_wandb / "out", offline_wandb / "board"
    args = ("explain", video, *EXAMPLE_MODEL, "-o", out, "--wandb", "clips", "--tensorboard", board, "--json")
    result = call_cli(*args)
    assert result.code == 0, result.stderr
    overlay = Path(result.records()[0]["outputs"][0])
    (run,) = (offline_wandb / "wandb").glob("offline-run-*")
    (logged,) = (run / "files" / "media" / "videos").rglob("*.mp4")
    assert logged.read_bytes() == overlay.read_bytes()  # the whole overlay video, as written
    (table_file,) = (run / "files" / "media" / "table").glob("records_*.table.json")
    assert [row[1] for row in json.loads(table_file.read_text())["data"]] == list(range(6))  # a row per frame
    events = _events(board)
    assert events.Tags()["images"] == []  # TensorBoard shows no MP4: the frames are its table's rows
    assert len(_text(events, "records")[0][1].splitlines()) == 2 + 6


@pytest.mark.slow
def test_a_checkpoint_that_cannot_load_is_one_line_and_the_others_are_explained(checkpoints: Path, tmp_path: Path) -> None:
    import shutil

    folder = tmp_path / "ckpts"
    shutil.copytree(checkpoints, folder)
    (folder / "epoch=1-step=4.ckpt").write_bytes((folder / "epoch=1-step=4.ckpt").read_bytes()[:4000])  # cut short
    labels = str(EXAMPLES / "shapes_model" / "labels.txt")
    out = tmp_path / "out"
    result = call_cli("explain", SCENES[0], "-m", "test_resnet", "--labels", labels, "--weights", folder / "*.ckpt", "-o", out, "--json")
    assert result.code == 1
    said = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(said) == 1 and "epoch=1-step=4.ckpt" in said[0] and said[0].endswith("; the other checkpoints go on"), result.stderr
    assert len(result.records()) == 2
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["epoch=0-step=2", "epoch=2-step=6"]
    unknown = call_cli("explain", SCENES[0], "-m", "no_such_model_xyz", "--weights", folder / "*.ckpt", "-o", tmp_path / "o2")
    assert unknown.code == 2 and "checkpoint 2 of 3" not in unknown.stderr  # the model itself: stops at the first
