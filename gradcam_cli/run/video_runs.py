"""Videos in the stream: each one's chosen frames handed on as images, and its overlay video written as they come back.

A video input becomes its frames, decoded one at a time here (in the run's
own thread: a decoder is sequential) and explained in the batches like any
image; their pictures come back in input order (the pipeline reports results
in order) and are encoded into the video's file as they arrive, so nothing
holds the whole video. After its last frame an end marker closes the file,
which only then gets its final name; a video whose stream breaks part way, or
a run stopped in the middle of one, leaves no file under that name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
from pathlib import Path

from gradcam_cli.errors import InputError
from gradcam_cli.inputs.video import FramePick, VideoReader, is_video
from gradcam_cli.outputs.picture import draw
from gradcam_cli.outputs.records import ImageRecord
from gradcam_cli.outputs.video_files import FramePicture, MapSmoother, VideoFile, video_complete
from gradcam_cli.outputs.writer import ResultWriter
from gradcam_cli.run.batches import Item
from gradcam_cli.settings import ExplainSettings
from gradcam_cli.option_table import as_flag, in_flags


@dataclass(eq=False)
class VideoJob:
    """One input video's outputs: the overlay video's path, the maps' .npy with ⟨save_raw⟩, the rate it plays at."""

    path: Path
    raw: Path | None
    rate: Fraction
    pick: FramePick
    smooth: int
    file: VideoFile | None = None
    smoother: MapSmoother | None = None
    frames: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class VideoEnd:
    """After a video's last frame: close its file, or (`broken`) discard it."""

    job: VideoJob
    broken: bool = False


@dataclass(frozen=True)
class FrameDone:
    """A frame's picture on its way back to its video."""

    job: VideoJob
    picture: FramePicture


class VideoRuns:
    """The run's videos: expanded into frames going in, written as their pictures come out."""

    def __init__(self, settings: ExplainSettings, writer: ResultWriter, refusal: str | None) -> None:
        self.writer = writer
        inputs = settings.inputs
        self.pick = FramePick(every=inputs.every, fps=inputs.fps)
        self.smooth = settings.outputs.smooth
        self.skip_existing = settings.outputs.skip_existing
        self.refusal = refusal  # why this run cannot make videos (several maps a frame): each video's one line
        self.open: dict[int, VideoJob] = {}

    def expand(self, items: Iterable[Item], checkpoint: Callable[[], None]) -> Iterator[Item]:
        """Each image as it is; each video as its chosen frames, then its end marker (or one error item)."""
        for item in items:
            if item.error or not is_video(item.source.path):
                yield item
                continue
            yield from self._frames(item, checkpoint)

    def _frames(self, item: Item, checkpoint: Callable[[], None]) -> Iterator[Item]:
        path = item.source.path
        if self.refusal:
            yield _failed(item, in_flags(f"{path}: {self.refusal}"))
            return
        try:
            overlay, raw = self.writer.namer.video_paths(item.base, self.writer.save_raw)
            if self.skip_existing and video_complete(overlay) and not self.writer.provenance.others(overlay):
                yield _failed(item, None, existing=[overlay, *([raw] if raw is not None else [])])
                return
            self.writer.provenance.claim(overlay)
            reader = VideoReader(path)
        except InputError as error:
            yield _failed(item, error.spelled(as_flag))
            return
        job = VideoJob(overlay, raw, self.pick.rate(reader.info), self.pick, self.smooth)
        with reader:
            try:
                for frame in reader.frames(self.pick):
                    checkpoint()
                    yield Item(item.source, item.base, frame=frame, video=job)
            except InputError as error:
                yield _failed(item, error.spelled(as_flag))
                yield Item(item.source, item.base, end=VideoEnd(job, broken=True))
                return
        yield Item(item.source, item.base, end=VideoEnd(job))

    def take(self, result: object) -> ImageRecord | None:
        """In input order: a frame's picture into its video (its record given back), or a video's end."""
        if isinstance(result, FrameDone):
            self._add(result.job, result.picture)
            return result.picture.record
        if isinstance(result, VideoEnd):
            self._end(result)
            return None
        assert isinstance(result, ImageRecord)
        return result

    def _add(self, job: VideoJob, picture: FramePicture) -> None:
        if job.file is None:
            self.writer.folders.prepare(job.path.parent)
            job.file = VideoFile(job.path, job.rate, self.writer.provenance.text, job.raw)
            job.smoother = MapSmoother(job.smooth) if job.smooth > 1 and picture.drawn is None else None
            self.open[id(job)] = job
        pictures = job.smoother.push(picture) if job.smoother is not None else iter([picture])
        for ready in pictures:
            self._encode(job, ready)

    def _encode(self, job: VideoJob, picture: FramePicture) -> None:
        assert job.file is not None
        rgb = picture.drawn if picture.drawn is not None else self._drawn(job, picture)
        job.file.add(rgb, picture.raw if job.raw is not None else None)

    def _drawn(self, job: VideoJob, picture: FramePicture) -> np.ndarray:
        """A classifier's frame drawn in the run's style, its caption saying the frame's time (and the smoothing)."""
        if picture.shown is None:  # a frame whose map failed: the frame as it is, so the video keeps its length
            return picture.image
        caption = picture.caption
        if caption is not None:
            record = picture.record
            caption += f" · {record.time:.2f} s" + (f" · smooth {job.smooth}" if job.smooth > 1 else "")
        writer = self.writer
        return draw(
            picture.image, picture.shown, style=writer.style, colormap=writer.colormap, alpha=writer.alpha, caption=caption,
            scale=picture.scale,
        )  # fmt: skip

    def _end(self, end: VideoEnd) -> None:
        job = end.job
        self.open.pop(id(job), None)
        if job.file is None:
            return
        if end.broken:
            job.file.abort()
            return
        if job.smoother is not None:
            for ready in job.smoother.flush():
                self._encode(job, ready)
        job.file.finish()

    def abort_all(self) -> None:
        """A stop: every video still being written is discarded (its frames' records stand; a rerun redoes it)."""
        for job in self.open.values():
            if job.file is not None:
                job.file.abort()
        self.open.clear()


def _failed(item: Item, message: str | None, existing: list[Path] | None = None) -> Item:
    return Item(item.source, item.base, error=message, existing=existing)


def video_refusal(several_maps: bool, smooth_applies: bool, settings: ExplainSettings) -> str | None:
    """Why this run cannot write videos, as each video's one line; None when it can."""
    if several_maps:
        return "a video shows one map a frame: explain one class (the top one, or one ⟨classes⟩) for videos"
    if settings.outputs.each:
        return "a video shows one picture a frame: ⟨each⟩ does not apply to videos"
    if settings.outputs.save_guided:
        return "⟨save_guided⟩ does not apply to videos"
    if settings.outputs.smooth > 1 and not smooth_applies:
        return "⟨smooth⟩ averages one map a frame; a detector's or segmenter's maps follow their objects: leave it out"
    return None
