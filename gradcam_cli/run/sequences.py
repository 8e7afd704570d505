"""Inputs that are many pictures, in the stream: a video's frames, a volume's slices (⟨slices⟩), each explained as an
image, and their maps gathered back into one output (an overlay video; a NIfTI map and its montage).

Each kind (run/video_kind.py, run/slices_kind.py) says which inputs are its
own, opens one into its pictures and makes the sink its maps go to. Here, in
the run's own thread: an input of a kind becomes its pictures (decoded one at
a time) and then an end marker; their results come back in input order (the
pipeline reports results in order), each picture into its input's sink, after
⟨smooth⟩ has averaged its map with its neighbours'; the end marker closes the
sink, which only then writes under the final names. A broken input or a stop
leaves nothing under them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from gradcam_cli.errors import InputError
from gradcam_cli.geometry import to_input_array
from gradcam_cli.inputs.video import Clip, Frame
from gradcam_cli.inputs.volume_slices import WholeVolume
from gradcam_cli.maps import CamBatch
from gradcam_cli.model.data_config import DataConfig
from gradcam_cli.outputs.frame_files import at_frame, clip_pictures, frame_picture, volume_picture
from gradcam_cli.option_words import as_flag, in_flags
from gradcam_cli.outputs.records import ImageRecord
from gradcam_cli.outputs.video_files import FramePicture, MapSmoother
from gradcam_cli.outputs.writer import ResultWriter
from gradcam_cli.run.batches import Item
from gradcam_cli.settings import ExplainSettings


class Sink(Protocol):
    """Where one input's pictures go, in order, and what is written when the last is in."""

    def add(self, picture: FramePicture) -> None: ...

    def finish(self) -> None: ...

    def abort(self) -> None: ...


class Opened(Protocol):
    """One input of a kind, opened: its pictures one at a time; closed when they are done."""

    def frames(self) -> Iterator[Frame | Clip | WholeVolume]: ...

    def __enter__(self) -> Opened: ...

    def __exit__(self, *exc: object) -> None: ...


@dataclass(eq=False)
class SequenceJob:
    """One input's way out: the file its pictures' records name (`output`), the sink made for it, the smoothing."""

    output: Path
    make_sink: Callable[[], Sink]
    smooth: int = 1
    intensity: str | None = None  # a volume's: how its intensities were scaled, said in each slice's record
    raw: Path | None = None  # ⟨save_raw⟩'s file, when the kind writes one
    sink: Sink | None = None
    smoother: MapSmoother | None = None


class SequenceKind(Protocol):
    """A kind of input that is many pictures: which inputs, why a run cannot take them, how one is opened."""

    def accepts(self, path: Path) -> bool: ...

    def refusal(self, run: RunShape) -> str | None: ...

    def outputs(self, item: Item) -> list[Path]:
        """The files this input's sink writes (the first names them in records), for ⟨skip_existing⟩ and the claim."""
        ...

    def complete(self, outputs: list[Path]) -> bool: ...

    def open(self, item: Item, outputs: list[Path]) -> tuple[Opened, SequenceJob]: ...


@dataclass(frozen=True)
class RunShape:
    """What a kind asks of the run before it takes an input: how many maps a picture, whether they can be smoothed."""

    settings: ExplainSettings
    several_maps: bool  # several classes an image (⟨topk⟩, several ⟨classes⟩, ⟨multilabel⟩)
    one_map: bool  # a classifier's one map a picture (a detector's and segmenter's follow their objects)
    clip_length: int | None = None  # a video classifier's frames a clip (None: the model takes images)


@dataclass(frozen=True)
class SequenceEnd:
    """After an input's last picture: close its sink, or (`broken`) discard it."""

    job: SequenceJob
    broken: bool = False


@dataclass(frozen=True)
class PictureDone:
    """A picture's results on their way back to its input's sink (a video classifier's clip: the frames it shows)."""

    job: SequenceJob
    pictures: list[FramePicture]


class SequenceRuns:
    """The run's inputs of many pictures: expanded going in, gathered coming out."""

    def __init__(self, kinds: tuple[SequenceKind, ...], shape: RunShape, writer: ResultWriter) -> None:
        self.kinds, self.shape, self.writer = kinds, shape, writer
        self.open: dict[int, SequenceJob] = {}

    def expand(self, items: Iterable[Item], checkpoint: Callable[[], None]) -> Iterator[Item]:
        """Each image as it is; each input of a kind as its pictures, then its end marker (or one error item)."""
        for item in items:
            kind = None if item.error else next((k for k in self.kinds if k.accepts(item.source.path)), None)
            if kind is None:
                yield item
                continue
            yield from self._pictures(kind, item, checkpoint)

    def _pictures(self, kind: SequenceKind, item: Item, checkpoint: Callable[[], None]) -> Iterator[Item]:
        path = item.source.path
        if (refused := kind.refusal(self.shape)) is not None:
            yield _failed(item, in_flags(f"{path}: {refused}"))
            return
        try:
            outputs = kind.outputs(item)
            if self.shape.settings.outputs.skip_existing and kind.complete(outputs) and not self.writer.provenance.others(outputs[-1]):
                yield _failed(item, None, existing=outputs)
                return
            self.writer.provenance.claim(outputs[-1])  # the file that carries the stamp
            opened, job = kind.open(item, outputs)
        except InputError as error:
            yield _failed(item, error.spelled(as_flag))
            return
        with opened:
            try:
                for frame in opened.frames():
                    checkpoint()
                    yield Item(item.source, item.base, frame=frame, sequence=job)
            except InputError as error:
                yield _failed(item, error.spelled(as_flag))
                yield Item(item.source, item.base, end=SequenceEnd(job, broken=True))
                return
        yield Item(item.source, item.base, end=SequenceEnd(job))

    def take(self, result: object) -> list[ImageRecord]:
        """In input order: a picture's results into its input's sink (their records given back), an input's end (no
        record), or an image's record."""
        if isinstance(result, PictureDone):
            intensity = result.job.intensity
            for picture in result.pictures:
                self._add(result.job, picture)
            records = [picture.record for picture in result.pictures]
            return records if intensity is None else [record.told_intensity(intensity) for record in records]
        if isinstance(result, SequenceEnd):
            self._end(result)
            return []
        assert isinstance(result, ImageRecord)
        return [result]

    def _add(self, job: SequenceJob, picture: FramePicture) -> None:
        if job.sink is None:
            self.writer.folders.prepare(job.output.parent)
            job.sink = job.make_sink()
            job.smoother = MapSmoother(job.smooth) if job.smooth > 1 and picture.drawn is None else None
            self.open[id(job)] = job
        for ready in job.smoother.push(picture) if job.smoother is not None else [picture]:
            job.sink.add(ready)

    def _end(self, end: SequenceEnd) -> None:
        job = end.job
        self.open.pop(id(job), None)
        if job.sink is None:
            return
        if end.broken:
            job.sink.abort()
            return
        if job.smoother is not None:
            for ready in job.smoother.flush():
                job.sink.add(ready)
        job.sink.finish()

    def abort_all(self) -> None:
        """A stop: every output still being gathered is discarded (its pictures' records stand; a rerun redoes it)."""
        for job in self.open.values():
            if job.sink is not None:
                job.sink.abort()
        self.open.clear()


def model_input(item: Item, config: DataConfig) -> np.ndarray:
    """What the model reads of an item: an image's or a frame's (3, H, W), a clip's (3, T, H, W), each frame prepared
    as an image and stacked along time."""
    assert item.image is not None and item.geometry is not None
    if isinstance(item.frame, WholeVolume):
        return item.frame.model_array(config.input_size, config.mean, config.std)
    if isinstance(item.frame, Clip):
        return np.stack([to_input_array(frame.image, item.geometry, config) for frame in item.frame.frames], axis=1)
    return to_input_array(item.image, item.geometry, config)


def explained_pictures(writer: ResultWriter, item: Item, cams: CamBatch, row: int) -> PictureDone:
    """In a worker thread: a frame's, slice's or clip's maps made into what its input's sink takes, with their records."""
    job, path, geometry = item.sequence, item.source.path, item.geometry
    assert geometry is not None
    if isinstance(item.frame, Clip):
        return PictureDone(job, clip_pictures(writer, path, item.frame, geometry, cams, row, job.output, job.raw))
    if isinstance(item.frame, WholeVolume):
        return PictureDone(job, [volume_picture(writer, path, item.frame, cams, row, job.output)])
    return PictureDone(job, [frame_picture(writer, path, item.frame, geometry, cams, row, item.base, job.output, job.raw)])


def failed_pictures(item: Item, record: ImageRecord) -> PictureDone:
    """A picture that failed goes back to its input's output all the same, shown without a map, so a video keeps its
    length; a clip's, as each frame it shows."""
    if isinstance(item.frame, WholeVolume):
        return PictureDone(item.sequence, [FramePicture(record, item.frame.image)])
    frames = [item.frame.frames[t] for t in item.frame.shown] if isinstance(item.frame, Clip) else [item.frame]
    return PictureDone(item.sequence, [FramePicture(at_frame(record, frame), frame.image) for frame in frames])


def _failed(item: Item, message: str | None, existing: list[Path] | None = None) -> Item:
    return Item(item.source, item.base, error=message, existing=existing)
