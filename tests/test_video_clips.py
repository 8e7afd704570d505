"""Video classifiers that take clips (N, 3, T, H, W): a video cut into clips, each clip's spatio-temporal map put back on
every frame it shows, the clip's class in each frame's record; what a clip model cannot take, one line each."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import EXAMPLES, require, write_image

sys.path.insert(0, str(EXAMPLES))
from shapes import make_moving_scene  # noqa: E402

av = require("av")
from test_video import read_video, write_video  # noqa: E402

# A 3-D network whose score reads only one block of its features: frames 2 to 5 of the clip, rows and columns 8 to 16 of
# its 32x32 input. Its map (hirescam: gradient times activation) can lie nowhere else.
NET = """
import torch
from torch import nn


class BlockReader(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv3d(3, 4, 3, padding=1), nn.ReLU())
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        a = self.features(x)
        return self.head(a[:, :, 2:6, 8:16, 8:16].mean(dim=(2, 3, 4)))


def build():
    torch.manual_seed(0)
    net = BlockReader()
    with torch.no_grad():
        net.features[0].bias.fill_(0.5)  # every feature positive: the block's gradient is the only place the map can be
        net.head.weight.fill_(1.0)
    return net
"""


def clip_video(path: Path, frames: int = 10) -> Path:
    images, _, _ = make_moving_scene(np.random.default_rng(8), 64, 48, frames)
    return write_video(path, [np.asarray(image) for image in images])


def test_a_video_classifier_explains_clips_and_puts_each_map_back_on_its_frames(run_cli, tmp_path) -> None:
    video = clip_video(tmp_path / "clip.mp4")
    out = tmp_path / "out"
    model = ("--model", "torchvision:r3d_18", "--no-pretrained", "--clip-len", 4, "--input-size", 32)
    result = run_cli("explain", video, *model, "-o", out, "--json", "--save-raw")
    assert result.code == 0, result.stderr
    records = result.records()
    assert [r["frame"] for r in records] == list(range(10))
    assert [r["clip"] for r in records] == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2]  # the last clip: the video's last 4 frames
    assert len({r["class_index"] for r in records if r["clip"] == 1}) == 1  # a clip's frames share its class
    frames, rate, _ = read_video(out / "clip.mp4.gradcam.mp4")
    assert len(frames) == 10 and rate == 12
    maps = np.load(out / "clip.mp4.gradcam.npy")
    assert maps.shape == (10, 48, 64) and np.isfinite(maps).all()


def test_a_clips_map_lies_where_and_when_the_model_looks(run_cli, tmp_path, in_test_folder) -> None:
    """The network reads frames 2-5 of each 8-frame clip, rows and columns 8-16 of 32: its map lies there on those frames
    (in the 64x48 frame: columns 16-32, rows 12-24) and nowhere on the others."""
    (Path.cwd() / "net.py").write_text(NET)
    video = clip_video(Path.cwd() / "clip.mp4", frames=8)
    out = tmp_path / "out"
    model = ("--model", "net.py:build", "--clip-len", 8, "--input-size", 32, "--layer", "features", "--method", "hirescam")
    result = run_cli("explain", video, *model, "--mean", "0.5", "--std", "0.5", "-o", out, "--json", "--save-raw")
    assert result.code == 0, result.stderr
    maps = np.load(out / "clip.mp4.hirescam.npy")
    assert maps.shape == (8, 48, 64)
    block = np.zeros((48, 64), bool)
    block[12:24, 16:32] = True
    for t in (2, 3, 4, 5):
        assert maps[t][block].sum() / maps[t].sum() > 0.9, t  # bilinear spread over the block's edge: a little outside
    assert maps[[0, 7]].max() < 0.05 * maps.max()  # frames the network never reads (its 3x3x3 kernel reaches one frame out)


def test_what_a_clip_model_cannot_take_is_one_line_each(run_cli, tmp_path) -> None:
    video = clip_video(tmp_path / "clip.mp4", frames=4)
    still = write_image(tmp_path / "still.png", 64, 48)
    model = ("--model", "torchvision:r3d_18", "--no-pretrained", "--clip-len", 4, "--input-size", 32)
    result = run_cli("explain", still, video, *model, "-o", tmp_path / "out", "--json")
    records = result.records()
    assert result.code == 1 and records[0]["ok"] is False and records[1]["ok"] is True
    assert records[0]["error"] == f"{still}: the model takes clips of 4 frames (N×3×T×H×W): give it videos"


@pytest.mark.parametrize(
    "count,length,stride,clips_of_frames",
    [
        (10, 4, 4, [0, 0, 0, 0, 1, 1, 1, 1, 2, 2]),
        (10, 4, 2, [0, 0, 0, 1, 1, 2, 2, 3, 3, 4]),  # overlapping: each frame from the clip whose middle is nearest
        (3, 4, 4, [0, 0, 0]),  # shorter than a clip: one clip, padded with its last frame
        (10, 4, 6, [0, 0, 0, 0, None, None, 1, 1, 1, 1]),  # a stride past the clip: the frames between are in no clip
    ],
)
def test_clips_show_every_frame_once_in_order(count, length, stride, clips_of_frames) -> None:
    from gradcam_cli.inputs.video import Frame, clips

    frames = [Frame(i, i / 10, np.full((1, 1, 3), i, np.uint8)) for i in range(count)]
    made = list(clips(iter(frames), length, stride))
    assert all(len(clip.frames) == length for clip in made)
    shown = [(clip.frames[t].index, clip.index) for clip in made for t in clip.shown]
    assert [index for index, _ in shown] == [i for i, c in enumerate(clips_of_frames) if c is not None]
    assert [c for _, c in shown] == [c for c in clips_of_frames if c is not None]
