"""Overlay videos out: each frame's picture encoded as it comes (H.264), under a temporary name until the video is whole.

A video of the maps is written one frame at a time, so memory stays flat in
the video's length, and only renamed to `NAME.EXT.METHOD.mp4` when its last
frame is in: a killed or stopped run leaves no half video under the final
name (a killed run's temporary file is removed by the next run's
`remove_stale_temps`). The run's stamp (outputs/provenance.py) is the
container's `comment` tag, read back before a video is replaced or counted as
done. `--smooth K` averages each frame's map with its neighbours' before it is
drawn (MapSmoother), so a map does not flicker between near-equal frames.
"""

from __future__ import annotations

import os
import shutil
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from gradcam_cli.inputs.video import pyav
from gradcam_cli.outputs.files import FILE_MODE, temp_path
from gradcam_cli.outputs.records import ImageRecord

CODEC = "libx264"  # H.264: what every browser, player and editor plays
PIXEL_FORMAT = "yuv420p"  # the format players expect of H.264; it needs an even width and height
QUALITY = {"crf": "18", "preset": "veryfast"}  # near-lossless for an overlay's flat colours, quick to encode


@dataclass
class FramePicture:
    """What a frame's worker thread hands the video: its record, and its picture or the parts to draw it from.

    A classifier's frame keeps its map (`shown`, in [0, 1] on the photo) undrawn, so the video can smooth the maps
    over neighbouring frames first; a detector's or segmenter's is drawn already (`drawn`).
    """

    record: ImageRecord
    image: np.ndarray
    shown: np.ndarray | None = None
    drawn: np.ndarray | None = None
    raw: np.ndarray | None = None  # ⟨save_raw⟩: the map as computed, at the photo's size
    caption: str | None = None  # the picture's caption, before the video adds the frame's time
    scale: Any = None  # the caption band's colour scale (outputs/legend.Scale)


def even(rgb: np.ndarray) -> np.ndarray:
    """A picture padded by one black row or column where its size is odd: H.264's 4:2:0 needs even sides."""
    height, width = rgb.shape[:2]
    if height % 2 == 0 and width % 2 == 0:
        return rgb
    return np.pad(rgb, ((0, height % 2), (0, width % 2), (0, 0)))


class VideoFile:
    """One overlay video being written: frames encoded in order, the maps of ⟨save_raw⟩ streamed beside it."""

    def __init__(self, path: Path, rate: Fraction, stamp: str, raw: Path | None = None) -> None:
        self.path, self.rate, self.stamp, self.raw_path = path, rate, stamp, raw
        self.frames = 0
        self._temp = temp_path(path.parent)
        self._container: Any = None
        self._stream: Any = None
        self._raw_temp = temp_path(path.parent) if raw is not None else None
        self._raw: BinaryIO | None = None
        self._raw_shape: tuple[int, ...] | None = None

    def add(self, rgb: np.ndarray, raw: np.ndarray | None = None) -> None:
        """Encode one frame's picture (the first one fixes the video's size); ⟨save_raw⟩'s map appended beside it."""
        av = pyav()
        rgb = even(np.ascontiguousarray(rgb, dtype=np.uint8))
        if self._container is None:
            self._open(av, rgb.shape[1], rgb.shape[0])
        frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
        frame.pts = self.frames
        for packet in self._stream.encode(frame):
            self._container.mux(packet)
        self.frames += 1
        if raw is not None and self._raw_temp is not None:
            self._append_raw(raw.astype(np.float32))

    def _open(self, av: Any, width: int, height: int) -> None:
        self._container = av.open(str(self._temp), mode="w", format="mp4")
        self._container.metadata["comment"] = self.stamp
        stream = self._container.add_stream(CODEC, rate=self.rate, options=QUALITY)
        stream.width, stream.height, stream.pix_fmt = width, height, PIXEL_FORMAT
        stream.time_base = Fraction(1) / self.rate
        self._stream = stream

    def _append_raw(self, raw: np.ndarray) -> None:
        if self._raw is None:
            assert self._raw_temp is not None
            self._raw = open(os.open(self._raw_temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE), "wb")
            self._raw_shape = raw.shape
        if raw.shape != self._raw_shape:
            raise ValueError(f"a frame's map is {raw.shape}, the video's first {self._raw_shape}")
        self._raw.write(np.ascontiguousarray(raw).tobytes())

    def finish(self) -> None:
        """The last frame is in: the encoder flushed, the file closed and renamed (and the maps' .npy beside it)."""
        if self._container is None:
            return
        for packet in self._stream.encode():
            self._container.mux(packet)
        self._container.close()
        self._container = None
        if self._raw is not None and self.raw_path is not None and self._raw_temp is not None and self._raw_shape is not None:
            self._raw.close()
            self._raw = None
            _npy_from(self._raw_temp, self.raw_path, (self.frames, *self._raw_shape))
        os.replace(self._temp, self.path)

    def abort(self) -> None:
        """A stop or a broken input: nothing is left under the final name, the temporary files removed."""
        for handle in (self._raw,):
            if handle is not None:
                handle.close()
        if self._container is not None:
            try:
                self._container.close()
            except Exception:  # noqa: BLE001 - an encoder that failed part way is discarded all the same
                pass
        self._container = self._raw = None
        for temp in (self._temp, self._raw_temp):
            if temp is not None:
                temp.unlink(missing_ok=True)


def _npy_from(data: Path, target: Path, shape: tuple[int, ...]) -> None:
    """An .npy of float32 maps (frames, H, W) from their raw bytes: the header written, the data copied, renamed."""
    from numpy.lib import format as npy

    temp = temp_path(target.parent)
    header = {"descr": npy.dtype_to_descr(np.dtype(np.float32)), "fortran_order": False, "shape": shape}
    try:
        with open(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE), "wb") as out, open(data, "rb") as raw:
            npy.write_array_header_2_0(out, header)
            shutil.copyfileobj(raw, out, 1 << 22)
        os.replace(temp, target)
    finally:
        data.unlink(missing_ok=True)
        temp.unlink(missing_ok=True)


class MapSmoother:
    """⟨smooth⟩ K: each frame's map the mean of the K maps centred on it (fewer at the ends), held back K/2 frames.

    The frames come out in order, each once the frames after it that its window needs are in.
    """

    def __init__(self, frames: int) -> None:
        self.before = (frames - 1) // 2
        self.after = frames - 1 - self.before
        self._window: deque[np.ndarray | None] = deque()  # the maps from `before` frames back to the newest
        self._waiting: deque[FramePicture] = deque()  # frames not yet given out, oldest first
        self._given = 0  # how many maps in the window lie before the first waiting frame

    def push(self, frame: FramePicture) -> Iterator[FramePicture]:
        self._window.append(frame.shown)
        self._waiting.append(frame)
        while len(self._window) - self._given > self.after:
            yield self._next()

    def flush(self) -> Iterator[FramePicture]:
        while self._waiting:
            yield self._next()

    def _next(self) -> FramePicture:
        frame = self._waiting.popleft()
        maps = [m for m in list(self._window)[: self._given + 1 + self.after] if m is not None]
        if frame.shown is not None and maps:
            frame.shown = np.asarray(np.mean(maps, axis=0, dtype=np.float32)) if len(maps) > 1 else frame.shown
        self._given += 1
        while self._given > self.before:
            self._window.popleft()
            self._given -= 1
        return frame


def video_stamp(path: Path) -> str | None:
    """The stamp text an overlay video carries (its `comment` tag); None when it has none or is not a video we read."""
    try:
        av = pyav()
        with av.open(str(path), mode="r") as container:
            text = container.metadata.get("comment")
    except Exception:  # noqa: BLE001 - a foreign or broken file simply carries no stamp of ours
        return None
    return text if isinstance(text, str) else None


def video_complete(path: Path) -> bool:
    """A whole video as we write it: it opens, holds a video stream with frames, and its first frame decodes."""
    try:
        av = pyav()
        with av.open(str(path), mode="r") as container:
            streams = container.streams.video
            if not streams or not streams[0].frames:
                return False
            next(container.decode(streams[0]))
            return True
    except Exception:  # noqa: BLE001 - truncated, foreign, unreadable: not complete
        return False
