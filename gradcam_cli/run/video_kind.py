"""Videos as a kind of input of many pictures (run/sequences.py): their frames in, an overlay video out.

The frames are chosen by ⟨every⟩ or ⟨fps⟩ (inputs/video.py) and each frame's
picture is drawn here, in the run's own thread and in order, after ⟨smooth⟩
has averaged its map: a classifier's frame comes back with its map undrawn.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from gradcam_cli.inputs.video import Clip, Frame, FramePick, VideoReader, clips, is_video
from gradcam_cli.outputs.picture import draw
from gradcam_cli.outputs.video_files import FramePicture, VideoFile, video_complete
from gradcam_cli.outputs.writer import ResultWriter
from gradcam_cli.run.batches import Item
from gradcam_cli.run.sequences import Opened, RunShape, SequenceJob


class VideoSink:
    """A video's frames drawn in the run's style and encoded into its overlay video."""

    def __init__(self, file: VideoFile, writer: ResultWriter, smooth: int) -> None:
        self.file, self.writer, self.smooth = file, writer, smooth

    def add(self, picture: FramePicture) -> None:
        rgb = picture.drawn if picture.drawn is not None else self._drawn(picture)
        self.file.add(rgb, picture.raw if self.file.raw_path is not None else None)

    def _drawn(self, picture: FramePicture) -> np.ndarray:
        """A classifier's frame drawn in the run's style, its caption saying the frame's time (and the smoothing)."""
        if picture.shown is None:  # a frame whose map failed: the frame as it is, so the video keeps its length
            return picture.image
        caption = picture.caption
        if caption is not None:
            time = picture.record.time or 0.0
            caption += f" · {time:.2f} s" + (f" · smooth {self.smooth}" if self.smooth > 1 else "")
        writer = self.writer
        return draw(
            picture.image, picture.shown, style=writer.style, colormap=writer.colormap, alpha=writer.alpha, caption=caption,
            scale=picture.scale,
        )  # fmt: skip

    def finish(self) -> None:
        self.file.finish()

    def abort(self) -> None:
        self.file.abort()


class VideoKind:
    """`.mp4 .mov .avi .mkv .webm .m4v` inputs: an overlay video `NAME.EXT.METHOD.mp4` each (and ⟨save_raw⟩'s .npy)."""

    def __init__(self, writer: ResultWriter, pick: FramePick, smooth: int, clip: tuple[int, int] | None = None) -> None:
        self.writer, self.pick, self.smooth = writer, pick, smooth
        self.clip = clip  # a video classifier's clip length and stride (None: each frame an image)

    def accepts(self, path: Path) -> bool:
        return is_video(path)

    def refusal(self, run: RunShape) -> str | None:
        """Why this run cannot write videos, as each video's one line; None when it can."""
        outputs = run.settings.outputs
        if run.clip_length is not None and not run.one_map:
            return "a 3-D segmenter's regions are a volume's; a video goes to a model that takes clips of frames"
        if run.several_maps:
            return "a video shows one map a frame: explain one class (the top one, or one ⟨classes⟩) for videos"
        if outputs.each:
            return "a video shows one picture a frame: ⟨each⟩ does not apply to videos"
        if outputs.save_guided:
            return "⟨save_guided⟩ does not apply to videos"
        if outputs.smooth > 1 and not run.one_map:
            return "⟨smooth⟩ averages one map a frame; a detector's or segmenter's maps follow their objects: leave it out"
        return None

    def outputs(self, item: Item) -> list[Path]:
        video, raw = self.writer.namer.video_paths(item.base, self.writer.save_raw)
        return [*([raw] if raw is not None else []), video]

    def complete(self, outputs: list[Path]) -> bool:
        return video_complete(outputs[-1]) and all(path.is_file() for path in outputs)

    def open(self, item: Item, outputs: list[Path]) -> tuple[Opened, SequenceJob]:
        reader = VideoReader(item.source.path)
        video, raw = outputs[-1], (outputs[0] if len(outputs) > 1 else None)
        rate, stamp = self.pick.rate(reader.info), self.writer.provenance.text
        job = SequenceJob(video, lambda: VideoSink(VideoFile(video, rate, stamp, raw), self.writer, self.smooth), self.smooth, raw=raw)
        return _Frames(reader, self.pick, self.clip), job


class _Frames:
    """An opened video as the sequence runner reads it: the chosen frames, or a video classifier's clips of them."""

    def __init__(self, reader: VideoReader, pick: FramePick, clip: tuple[int, int] | None) -> None:
        self.reader, self.pick, self.clip = reader, pick, clip

    def frames(self) -> Iterator[Frame | Clip]:
        frames = self.reader.frames(self.pick)
        return frames if self.clip is None else clips(frames, *self.clip)

    def __enter__(self) -> _Frames:
        return self

    def __exit__(self, *exc: object) -> None:
        self.reader.close()
