"""Video files in: frames decoded one at a time with PyAV (its wheels carry FFmpeg), chosen by ⟨every⟩ or ⟨fps⟩.

A video never sits in memory whole: `VideoReader.frames` yields each chosen
frame as an upright 8-bit RGB array while the decoder moves on, so a run's
memory is the same for ten seconds of video as for ten hours. PyAV is an
optional extra, imported only when a video is read. Every failure is an
InputError naming the file and why: no such stream, a file FFmpeg cannot
open, a stream that breaks part way (the frames before it were explained).
"""

from __future__ import annotations

import math
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from gradcam_cli.errors import InputError

VIDEO_SUFFIXES = frozenset({".mp4", ".mov", ".avi", ".mkv", ".webm", ".m4v"})
INSTALL = "pip install 'gradcam-cli[video]'"
TIME_SLACK = 1e-5  # seconds: frame times are rounded to microseconds, so a step is met within that
STEP_SLACK = 1e-3  # in steps of 1/⟨fps⟩: a time on a step, rounded, still counts as on it (up to 1,000 frames a second)
FALLBACK_RATE = Fraction(25)  # a stream that states no rate (rare: some AVI and MKV files) is read at PAL's 25 frames/s


def is_video(path: Path) -> bool:
    return path.suffix.lower() in VIDEO_SUFFIXES


def pyav() -> ModuleType:
    """PyAV, or one line saying how to install it."""
    try:
        import av
    except ImportError:
        raise InputError(f"reading and writing video needs PyAV: {INSTALL}") from None
    return av


@dataclass(frozen=True)
class Frame:
    """One picture of an input that holds many: a video's frame (its index among all the video's frames, its time in
    seconds) or a volume's slice (its index in the plane's stack; no time), and its pixels."""

    index: int
    time: float | None
    image: np.ndarray


@dataclass(frozen=True)
class VideoInfo:
    """What the container says of its video stream: size, rate, and (when it says) length."""

    width: int
    height: int
    rate: Fraction  # frames per second
    frames: int | None  # the stream's frame count, when the container states it
    duration: float | None  # seconds, when the container states it


@dataclass(frozen=True)
class FramePick:
    """Which frames a run explains: every ⟨every⟩-th, or ⟨fps⟩ frames a second (None: every frame)."""

    every: int = 1
    fps: float | None = None

    def rate(self, info: VideoInfo) -> Fraction:
        """The output video's frame rate: the input's, divided by ⟨every⟩, or ⟨fps⟩ when it is lower than the input's."""
        if self.fps is not None:
            return min(info.rate, Fraction(self.fps).limit_denominator(1001))
        return info.rate / self.every

    def chooser(self) -> Callable[[int, float], bool]:
        """Whether the frame at this index and time is explained: every ⟨every⟩-th, or the first frame at or after
        each 1/⟨fps⟩ step (a step no frame falls in is passed over, as a slower camera would)."""
        if self.fps is None:
            return lambda index, _time: index % self.every == 0
        fps, due = self.fps, [0.0]  # the next step's time

        def chosen(_index: int, time: float) -> bool:
            if time < due[0] - TIME_SLACK:
                return False
            due[0] = (math.floor(time * fps + STEP_SLACK) + 1) / fps
            return True

        return chosen

    def said(self) -> str:
        return f"{self.fps:g} frames/s" if self.fps is not None else ("every frame" if self.every == 1 else f"every {self.every}th frame")


class VideoReader:
    """One opened video file: its stream's description, then its chosen frames in order."""

    def __init__(self, path: Path) -> None:
        self.path = path
        _require_file(path)
        av = pyav()
        try:
            self._container = av.open(str(path), mode="r")
        except (av.FFmpegError, OSError, ValueError) as error:
            raise InputError(f"{path}: not a video FFmpeg can read ({_said(error)})") from None
        streams = self._container.streams.video
        if not streams:
            self.close()
            raise InputError(f"{path}: the file has no video stream (audio only?); nothing to explain")
        self._stream = streams[0]
        self._stream.thread_type = "AUTO"  # frame threads: decoding keeps up with the model
        self.info = _info(self._stream, self._container)
        self._start = self._stream.start_time or 0  # the first timestamp: times are counted from it

    def frames(self, pick: FramePick) -> Iterator[Frame]:
        """The chosen frames, decoded one at a time; a stream that breaks part way is an InputError naming the frame."""
        av = pyav()
        index, chosen = -1, pick.chooser()
        try:
            for decoded in self._container.decode(self._stream):
                index += 1
                time = _time(decoded, index, self.info.rate, self._start)
                if chosen(index, time):
                    yield Frame(index, time, decoded.to_ndarray(format="rgb24"))
        except (av.FFmpegError, OSError, ValueError) as error:
            where = f"after frame {index}" if index >= 0 else "before its first frame"
            raise InputError(f"{self.path}: the video stream breaks {where} ({_said(error)}); truncated or damaged?") from None
        if index < 0:
            raise InputError(f"{self.path}: the video stream holds no frame")

    def close(self) -> None:
        self._container.close()

    def __enter__(self) -> VideoReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _require_file(path: Path) -> None:
    """Only a regular file is opened: FFmpeg on a named pipe would wait for a writer for ever."""
    try:
        status = os.stat(path)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as error:
        raise InputError(f"{path}: cannot read ({error.strerror or error})") from None
    if not stat.S_ISREG(status.st_mode):
        raise InputError(f"{path}: not a regular file; only regular video files are read")
    if status.st_size == 0:
        raise InputError(f"{path}: empty file (0 bytes), not a video")


def _info(stream: Any, container: Any) -> VideoInfo:
    rate = stream.average_rate or stream.guessed_rate or stream.base_rate or FALLBACK_RATE
    duration = float(stream.duration * stream.time_base) if stream.duration and stream.time_base else None
    if duration is None and container.duration:
        duration = container.duration / 1_000_000  # the container's own, in microseconds
    return VideoInfo(
        width=int(stream.codec_context.width),
        height=int(stream.codec_context.height),
        rate=Fraction(rate),
        frames=int(stream.frames) or None,
        duration=duration,
    )


def _time(frame: Any, index: int, rate: Fraction, start: int) -> float:
    """A frame's time in seconds from the stream's start, by its own timestamp, else by its place in the stream."""
    if frame.pts is not None and frame.time_base is not None:
        return round(float((frame.pts - start) * frame.time_base), 6)
    return round(index / float(rate), 6)


def _said(error: BaseException) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return text.replace(" (errno", " (error").split(": '")[0]


@dataclass(frozen=True)
class Clip:
    """T chosen frames a video classifier takes at once, and which of them take their map from it (`shown`: positions in
    `frames`, each frame shown by the clip whose middle is nearest to it)."""

    index: int
    frames: tuple[Frame, ...]
    shown: tuple[int, ...]

    @property
    def image(self) -> np.ndarray:
        return self.frames[0].image


def clips(frames: Iterator[Frame], length: int, stride: int) -> Iterator[Clip]:
    """The chosen frames as clips of `length`, one starting every `stride` frames, and a last one ending with the video
    (padded by its last frame when the video is shorter than a clip) for the frames no earlier clip shows; a window
    of frames held, never the video."""
    held: list[Frame] = []  # chosen frames from `first` on
    first, count, index, shown_to = 0, 0, 0, 0  # shown_to: frames before it are shown (or in no clip)
    for frame in frames:
        held.append(frame)
        count += 1
        start = index * stride
        if count < start + length:
            continue
        shown = [f for f in range(max(start, shown_to), start + length) if _nearest_clip(f, length, stride) == index]
        yield Clip(index, tuple(held[start - first : start - first + length]), tuple(f - start for f in shown))
        shown_to = max(shown_to, shown[-1] + 1) if shown else shown_to
        index += 1
        keep = min(index * stride, shown_to, count - length)
        if keep > first:
            del held[: keep - first]
            first = keep
    if shown_to < count:  # the tail: the frames after the last whole clip, in a clip ending with the video
        start = max(0, count - length)
        members = held[start - first :]
        members += [members[-1]] * (length - len(members))
        yield Clip(index, tuple(members), tuple(range(max(start, shown_to) - start, count - start)))


def _nearest_clip(frame: int, length: int, stride: int) -> int | None:
    """The clip (of those starting every `stride` frames) that holds this frame with its middle nearest (ties: the
    earlier); None when no clip holds it (a stride longer than the clip)."""
    low, high = max(0, -(-(frame - length + 1) // stride)), frame // stride
    if low > high:
        return None
    return min(range(low, high + 1), key=lambda c: (abs(c * stride + (length - 1) / 2 - frame), c))
