"""Videos in, overlay videos out: frames streamed through the batches, the map following a moving shape, frame choice,
smoothing, resume at video granularity, and bad videos each one line with the rest of the run done."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from conftest import EXAMPLE_MODEL, EXAMPLES, cli_command, cli_env, require, write_image

sys.path.insert(0, str(EXAMPLES))
from shapes import make_moving_scene  # noqa: E402

av = require("av")
MAP_GRID = 5  # the example classifier's layer4 grid on its 160x160 input: a map's peak lies at best within a cell


def write_video(path: Path, frames: list[np.ndarray], rate: int = 12, codec: str = "libx264") -> Path:
    """A video of these RGB frames, as a camera or an editor would write it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as container:
        stream = container.add_stream(codec, rate=rate)
        stream.height, stream.width = frames[0].shape[:2]
        stream.pix_fmt = "yuv420p"
        for rgb in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def moving_clip(path: Path, seed: int, frames: int = 12, size: tuple[int, int] = (192, 144)) -> tuple[int, list[tuple[int, ...]]]:
    images, cls, boxes = make_moving_scene(np.random.default_rng(seed), size[0], size[1], frames)
    write_video(path, [np.asarray(image) for image in images])
    return cls, boxes


def read_video(path: Path) -> tuple[list[np.ndarray], Fraction, str | None]:
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        frames = [frame.to_ndarray(format="rgb24") for frame in container.decode(stream)]
        return frames, Fraction(stream.average_rate), container.metadata.get("comment")


def overlay_of(out: Path, video: Path, method: str = "gradcam") -> Path:
    return out / video.relative_to(Path.cwd()).parent / f"{video.name}.{method}.mp4"


@pytest.fixture
def clip(tmp_path: Path, in_test_folder: None) -> tuple[Path, int, list[tuple[int, ...]]]:
    path = Path.cwd() / "clips" / "shape.mp4"
    cls, boxes = moving_clip(path, seed=101)
    return path, cls, boxes


def test_the_overlay_video_has_the_inputs_frames_size_and_rate_and_a_record_per_frame(run_cli, clip, tmp_path) -> None:
    video, cls, _ = clip
    out = tmp_path / "out"
    result = run_cli("explain", video, *EXAMPLE_MODEL, "-o", out, "--json")
    assert result.code == 0, result.stderr
    records = result.records()
    assert [r["frame"] for r in records] == list(range(12))
    assert [r["time"] for r in records] == pytest.approx([k / 12 for k in range(12)], abs=1e-3)
    assert all(r["input"] == str(video) and r["class_index"] == cls for r in records)
    frames, rate, stamp = read_video(overlay_of(out, video))
    assert len(frames) == 12 and frames[0].shape == (144, 192, 3) and rate == 12
    with av.open(str(overlay_of(out, video))) as written:
        assert written.streams.video[0].codec_context.name == "h264"
    assert {r["outputs"][0] for r in records} == {str(overlay_of(out, video))}
    assert stamp is not None and json.loads(stamp)["method"] == "gradcam"  # the run's stamp, as a PNG carries it
    assert not [p for p in out.rglob("*") if p.name.startswith(".gradcam-tmp")]


@pytest.mark.parametrize("seed", [100, 101, 104])
def test_the_map_follows_the_moving_shape_on_every_frame(run_cli, tmp_path, in_test_folder, seed) -> None:
    """The trained example classifier's map peaks on the shape wherever it has moved: within half a map cell of its box
    (a map upsampled from a 5x5 grid peaks at best at the cell nearest the evidence)."""
    video = Path.cwd() / f"clip{seed}.mp4"
    _, boxes = moving_clip(video, seed)
    out = tmp_path / "out"
    assert run_cli("explain", video, *EXAMPLE_MODEL, "-o", out, "--save-raw").code == 0
    maps = np.load(overlay_of(out, video).with_suffix(".npy"))
    assert maps.shape == (12, 144, 192)
    cell = (192 / MAP_GRID, 144 / MAP_GRID)
    for k, (cam, (x0, y0, x1, y1)) in enumerate(zip(maps, boxes)):
        y, x = np.unravel_index(cam.argmax(), cam.shape)
        outside = max(max(x0 - x, 0, x - (x1 - 1)) / cell[0], max(y0 - y, 0, y - (y1 - 1)) / cell[1])
        assert outside <= 0.5, f"frame {k}: the peak ({x}, {y}) is {outside:.2f} cells from the shape's box {(x0, y0, x1, y1)}"


def test_every_and_fps_choose_the_frames_and_the_videos_rate(run_cli, clip, tmp_path) -> None:
    video, _, _ = clip
    every = run_cli("explain", video, *EXAMPLE_MODEL, "-o", tmp_path / "every", "--every", 4, "--json")
    assert [r["frame"] for r in every.records()] == [0, 4, 8]
    assert every.records()[0]["settings"]["every"] == 4
    frames, rate, _ = read_video(overlay_of(tmp_path / "every", video))
    assert len(frames) == 3 and rate == 3
    fps = run_cli("explain", video, *EXAMPLE_MODEL, "-o", tmp_path / "fps", "--fps", 5, "--json")
    assert [r["frame"] for r in fps.records()] == [0, 3, 5, 8, 10]  # the first frame at or after each fifth of a second
    frames, rate, _ = read_video(overlay_of(tmp_path / "fps", video))
    assert len(frames) == 5 and rate == 5
    half = run_cli("explain", video, *EXAMPLE_MODEL, "-o", tmp_path / "half", "--fps", 6, "--json")
    assert [r["frame"] for r in half.records()] == [0, 2, 4, 6, 8, 10]  # a step on a frame's (rounded) time is that frame
    both = run_cli("explain", video, *EXAMPLE_MODEL, "-o", tmp_path / "both", "--fps", 5, "--every", 2)
    assert both.code == 2 and "--every and --fps both choose a video's frames; give one" in both.stderr


def test_smoothing_averages_each_map_with_its_neighbours_centred() -> None:
    from gradcam_cli.outputs.records import ImageRecord
    from gradcam_cli.outputs.video_files import FramePicture, MapSmoother

    maps = [np.full((2, 2), float(k), np.float32) for k in range(6)]
    smoother = MapSmoother(3)
    out = []
    for k, cam in enumerate(maps):
        out += list(smoother.push(FramePicture(ImageRecord(input=str(k), ok=True), np.zeros((2, 2, 3)), shown=cam)))
        assert len(out) == max(0, k)  # each frame given out once the frame after it is in
    out += list(smoother.flush())
    assert [p.record.input for p in out] == [str(k) for k in range(6)]
    assert [float(p.shown[0, 0]) for p in out] == pytest.approx([0.5, 1, 2, 3, 4, 4.5])


def test_a_smoothed_run_says_so_in_its_records(run_cli, clip, tmp_path) -> None:
    video, _, _ = clip
    result = run_cli("explain", video, *EXAMPLE_MODEL, "-o", tmp_path / "out", "--smooth", 3, "--json", "--caption")
    assert result.code == 0 and {r["settings"]["smooth"] for r in result.records()} == {3}
    assert len(read_video(overlay_of(tmp_path / "out", video))[0]) == 12


def test_skip_existing_skips_a_whole_video_and_redoes_another_runs(run_cli, clip, tmp_path) -> None:
    video, _, _ = clip
    out = tmp_path / "out"
    assert run_cli("explain", video, *EXAMPLE_MODEL, "-o", out).code == 0
    made = overlay_of(out, video).stat().st_mtime_ns
    again = run_cli("explain", video, *EXAMPLE_MODEL, "-o", out, "--skip-existing", "--json")
    assert [r["skipped"] for r in again.records()] == [True]
    assert overlay_of(out, video).stat().st_mtime_ns == made
    other = run_cli("explain", video, *EXAMPLE_MODEL, "-o", out, "--skip-existing", "--smooth", 3)
    assert other.code != 0 and "was made by another run (smooth 1, this run 3)" in other.stderr and "--replace" in other.stderr


def test_bad_videos_are_one_line_each_and_the_rest_is_done(run_cli, clip, tmp_path) -> None:
    video, _, _ = clip
    folder = video.parent
    data = video.read_bytes()
    (folder / "truncated.mp4").write_bytes(data[: len(data) // 2])
    (folder / "text.mp4").write_text("not a video\n")
    write_audio(folder / "sound.mp4")
    write_image(folder / "still.png", 160, 120)
    out = tmp_path / "out"
    result = run_cli("explain", folder, *EXAMPLE_MODEL, "-o", out, "--json")
    assert result.code == 1
    records = result.records()
    errors = {Path(r["input"]).name: r["error"] for r in records if not r["ok"]}
    assert set(errors) == {"truncated.mp4", "text.mp4", "sound.mp4"}
    assert "no video stream" in errors["sound.mp4"]
    assert all("\n" not in line and "Traceback" not in line for line in errors.values())
    done = {Path(r["input"]).name for r in records if r["ok"]}
    assert done == {"shape.mp4", "still.png"}
    assert sorted(p.name for p in out.rglob("*.mp4")) == ["shape.mp4.gradcam.mp4"]  # no half video of a broken one


def write_audio(path: Path) -> Path:
    """An audio-only MP4: a file with a video's name and no video stream."""
    with av.open(str(path), "w") as container:
        stream = container.add_stream("aac", rate=8000)
        frame = av.AudioFrame.from_ndarray(np.zeros((1, 1024), np.float32), format="fltp", layout="mono")
        frame.sample_rate = 8000
        for packet in [*stream.encode(frame), *stream.encode()]:
            container.mux(packet)
    return path


@pytest.mark.parametrize(
    "option,said",
    [(("--topk", 2), "a video shows one map a frame"), (("--class", 0, "--class", 1), "a video shows one map a frame")],
    ids=["topk", "classes"],
)
def test_a_run_a_video_cannot_show_refuses_videos_in_one_line_and_does_the_images(run_cli, clip, tmp_path, option, said) -> None:
    video, _, _ = clip
    still = write_image(tmp_path / "still.png", 160, 120)
    result = run_cli("explain", video, still, *EXAMPLE_MODEL, "-o", tmp_path / "out", *option, "--json")
    records = result.records()
    assert records[0]["ok"] is False and said in records[0]["error"]
    assert records[1]["ok"] is True


def test_videos_come_on_stdin_too(run_cli, clip, tmp_path) -> None:
    video, _, _ = clip
    result = run_cli("explain", "-", *EXAMPLE_MODEL, "-o", tmp_path / "out", "--json", "--every", 6, stdin=f"{video}\n")
    assert result.code == 0 and [r["frame"] for r in result.records()] == [0, 6]
    assert "explained 2 of 2 video frames" in result.stderr  # what the records count, said


def test_a_detectors_video_draws_each_frames_boxes_over_their_maps(run_cli, tmp_path, in_test_folder) -> None:
    """The example detector on a clip: a record per frame with its detections, the box on the moving shape."""
    video = Path.cwd() / "detect.mp4"
    cls, boxes = moving_clip(video, seed=102, frames=6, size=(256, 192))
    detector = EXAMPLES / "shapes_detector_model"
    result = run_cli("explain", video, *detector_model(detector), "-o", tmp_path / "out", "--json")
    assert result.code == 0, result.stderr
    records = result.records()
    assert [r["frame"] for r in records] == list(range(6))
    for record, true in zip(records, boxes):
        best = max(record["detections"], key=lambda d: d["score"])
        x0, y0, x1, y1 = best["box"]
        assert best["class_index"] == cls and abs(x0 - true[0]) < 12 and abs(x1 - true[2]) < 12, (best, true)
    frames, _, _ = read_video(overlay_of(tmp_path / "out", video, "hirescam"))
    assert len(frames) == 6 and frames[0].shape == (192, 256, 3)
    each = run_cli("explain", video, *detector_model(detector), "-o", tmp_path / "each", "--each", "--json")
    assert [r["error"] for r in each.records()] == [f"{video}: a video shows one picture a frame: --each does not apply to videos"]


def detector_model(detector: Path) -> list[object]:
    return [
        "--model", f"{EXAMPLES / 'shapes_detector.py'}:build", "--weights", detector / "shapes_detector.safetensors",
        "--labels", detector / "labels.txt",
    ]  # fmt: skip


def test_a_video_without_pyav_is_one_line_naming_the_extra(run_cli, clip, tmp_path, monkeypatch) -> None:
    video, _, _ = clip
    monkeypatch.setitem(sys.modules, "av", None)
    result = run_cli("explain", video, *EXAMPLE_MODEL, "-o", tmp_path / "out")
    assert result.code != 0 and "pip install 'gradcam-cli[video]'" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow
def test_a_stop_in_the_middle_of_a_video_leaves_no_video_under_its_name(tmp_path) -> None:
    images, _, _ = make_moving_scene(np.random.default_rng(3), 192, 144, 240)
    video = write_video(tmp_path / "long.mp4", [np.asarray(image) for image in images])
    out = tmp_path / "out"
    command = cli_command("explain", video, *EXAMPLE_MODEL, "-o", out, "--json", "-b", 2)
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env())
    assert process.stdout is not None
    records = [json.loads(process.stdout.readline()) for _ in range(3)]  # the run is well into the video
    process.send_signal(signal.SIGINT)
    rest, _ = process.communicate(timeout=120)
    records += [json.loads(line) for line in rest.splitlines() if line.strip()]
    assert process.returncode == 130
    assert 3 <= len(records) < 240 and all(r["ok"] for r in records)
    assert not list(out.rglob("*.mp4")) and not [p for p in out.rglob("*") if p.name.startswith(".gradcam-tmp")]


def test_a_terminal_line_says_where_in_its_input_a_frame_or_slice_is() -> None:
    from gradcam_cli.cli.console import human_line
    from gradcam_cli.outputs.records import ImageRecord

    frame = ImageRecord(input="clip.mp4", ok=True, frame=12, time=0.5, outputs=["out/clip.mp4.gradcam.mp4"])
    assert human_line(frame).startswith("✓ clip.mp4 frame 12 (0.50 s) → out/clip.mp4.gradcam.mp4")
    assert human_line(ImageRecord(input="ct.nii.gz", ok=True, slice=7, outputs=["m.png"])).startswith("✓ ct.nii.gz slice 7 → m.png")
