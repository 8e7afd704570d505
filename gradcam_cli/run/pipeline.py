"""The batch engine: sources → decoded batches → maps → files and records.

The run is prepared once (prepare.py: model, layers, method, classes); images
stream through in batches (batches.py, with the out-of-memory policy),
decoded ahead by worker threads and written behind by them (outputs/writer.py),
so memory holds a window of images, never the folder. A bad image becomes an
error record and the rest go on; a bad layer or option stops the run before
any file is written.
"""

from __future__ import annotations

import contextlib
import errno
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from gradcam_cli.cams.methods import MethodKind
from gradcam_cli.errors import GradcamError, InputError, OutputError
from gradcam_cli.geometry import plan_geometry
from gradcam_cli.inputs.decode import load_image
from gradcam_cli.inputs.sources import Source
from gradcam_cli.inputs.truth import load_ground_truth
from gradcam_cli.maps import CamBatch, ProgressFn
from gradcam_cli.model.labels import class_aliases
from gradcam_cli.outputs.naming import OutputNamer, ensure_writable
from gradcam_cli.outputs.records import ImageRecord
from gradcam_cli.outputs.writer import ResultWriter
from gradcam_cli.run.batches import Batcher, Item
from gradcam_cli.run.prepare import PreparedRun, prepare_run
from gradcam_cli.run.resume import existing_outputs
from gradcam_cli.run.summary import Summary
from gradcam_cli.run.workers import OrderedResults, default_workers, done, ordered_map
from gradcam_cli.run.sequences import PictureDone, RunShape, SequenceKind, SequenceRuns, explained_pictures, failed_pictures, model_input
from gradcam_cli.run.slices_kind import SlicesKind
from gradcam_cli.run.video_kind import VideoKind
from gradcam_cli.run.volume_kind import VolumeKind
from gradcam_cli.inputs.volume_slices import WholeVolume
from gradcam_cli.model.blocks import input_channels_3d
from gradcam_cli.inputs.video import Clip, FramePick
from gradcam_cli.settings import ExplainSettings
from gradcam_cli.option_words import as_flag, in_flags
from gradcam_cli.vocab import Norm, TargetKind
from gradcam_cli.timings import stamp

if TYPE_CHECKING:
    from gradcam_cli.run.judge import TruthJudge
    from gradcam_cli.run.regions import RegionReader

OUTPUT_FATAL_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS}


class Explainer:
    """Holds the prepared run and explains a stream of sources."""

    def __init__(
        self,
        settings: ExplainSettings,
        warn: Callable[[str], None] = lambda _m: None,
        progress: ProgressFn | None = None,
        checkpoint: Callable[[], None] = lambda: None,
    ) -> None:
        self.settings = settings
        self.warn = lambda message: warn(in_flags(message))  # the engine serves the command line: its flags
        self.checkpoint = checkpoint  # raises when the run is asked to stop (Ctrl-C); called between images
        with model_prints_to_stderr():  # loading runs the user's code, and a forward to probe it
            self.prepared: PreparedRun = prepare_run(settings, warn=self.warn, progress=progress, checkpoint=checkpoint)
        stamp("ready")
        self.namer = _namer(self.prepared)
        names = self.prepared.loaded.class_names
        kind = self.prepared.kind
        detects = kind is TargetKind.detection  # a detector's truth is boxes, judged per batch (judge.py)
        self.judge = _judge(self.prepared, settings, self.warn) if detects and settings.inputs.truth else None
        # a segmenter's named region and true masks, read with each image (regions.py)
        self.regions = _regions(self.prepared) if kind is TargetKind.segment else None
        classifies = kind not in (TargetKind.detection, TargetKind.segment)
        self.truth = load_ground_truth(settings.inputs.truth, names, class_aliases(names), self.warn) if classifies else None
        self.summary = Summary()  # the counts of the last run: read them also when it was stopped part way
        self.workers = settings.run.workers or default_workers(self.prepared.device.type)
        one_by_one = self.prepared.method.kind is MethodKind.PERTURBATION  # minutes per image: each written when done
        # compute: the seam tests replace
        self.batcher = Batcher(self.compute, settings.run.batch_size, self.prepared.device, self.warn, one_by_one=one_by_one)
        outputs = settings.outputs
        self.writer = ResultWriter(
            self.namer,
            self.prepared.loaded.class_names,
            self.prepared.record_context(),
            colormap=outputs.colormap,
            alpha=outputs.alpha,
            style=outputs.style,
            caption=outputs.caption,
            save_raw=outputs.save_raw,
            save_guided=outputs.save_guided,
            raw_norm=settings.maps.norm is not Norm.minmax,
            kind=self.prepared.kind,
            replace=outputs.replace,
            each=outputs.each,
        )
        self.sequences = self._sequences()

    def _sequences(self) -> SequenceRuns:
        """The inputs of many pictures this run takes: videos, and volumes slice by slice."""
        classes, inputs = self.prepared.classes, self.settings.inputs
        several = classes is not None and (len(classes.classes) > 1 or classes.topk > 1 or classes.by_threshold)
        length = self.prepared.loaded.data_config.clip_length
        shape = RunShape(self.settings, several_maps=several, one_map=classes is not None, clip_length=length)
        clip = (length, inputs.clip_stride or length) if length is not None else None
        video = VideoKind(self.writer, FramePick(inputs.every, inputs.fps), self.settings.outputs.smooth, clip)
        if inputs.slices is not None:  # a 2-D model slice by slice, else the volume whole to a 3-D model
            volumes: SequenceKind = SlicesKind(self.writer, inputs.slices, inputs.window)
        else:
            volumes = VolumeKind(self.writer, inputs.window, input_channels_3d(self.model), self.prepared.kind is TargetKind.segment)
        kinds = (video, volumes)
        return SequenceRuns(kinds, shape, self.writer)

    @property
    def model(self) -> torch.nn.Module:
        return self.prepared.model

    @property
    def channels_last(self) -> bool:
        return self.prepared.channels_last

    def compute(self, x: torch.Tensor, items: Sequence[Item] = ()) -> CamBatch:
        """The maps of a preprocessed batch, computed as the run does; its items say what each image brings (a
        segmenter's named region and truth)."""
        regions = [item.regions for item in items]
        targets = self.prepared.targets.for_images(regions) if any(r is not None for r in regions) else None
        cams = self.prepared.compute(x, targets)
        stamp("first batch")
        return cams

    # ------------------------------------------------------------- streaming

    def run(self, sources: Iterable[Source], emit: Callable[[ImageRecord], None]) -> Summary:
        """Decode ahead and write behind in worker threads; the model runs in this one.

        Records come out in input order, each as soon as its files are written.
        On an interruption or an output failure, every image whose maps are
        done is still written, queued decoding is dropped, and the records of
        what was written still come out before the error goes up. What the
        model prints goes to stderr: stdout holds the records only.
        """
        with model_prints_to_stderr():
            return self._run(sources, emit)

    def _run(self, sources: Iterable[Source], emit: Callable[[ImageRecord], None]) -> Summary:
        summary = self.summary = Summary()

        said_empty = False
        seen: list[Path] = []

        def report(result: object) -> None:
            for record in self.sequences.take(result):  # a frame or slice goes into its output, its end closes it
                report_one(record)

        def report_one(record: ImageRecord) -> None:
            nonlocal said_empty
            if self.judge is not None or self.regions is not None:  # which truth entries named no input: said at the end
                seen.append(Path(record.input))
            record = self._told_truth(record)
            summary.count(record)
            if (record.detections == [] or record.segments == []) and not said_empty:  # nothing to explain: said once a run
                said_empty = True
                self.warn(_nothing_found(record, self.prepared.targets))
            emit(record)

        ensure_writable(self.settings.outputs.output_dir)
        for notice in self.prepared.notices:
            self.warn(notice)
        window = 2 * self.settings.run.batch_size
        pool = ThreadPoolExecutor(self.workers, thread_name_prefix="gradcam-io")
        writing = OrderedResults(limit=window)
        items = self.sequences.expand(self._named(sources), self.checkpoint)  # a video or volume: its pictures, then its end
        decoded = ordered_map(pool, self._decode, items, window)
        try:
            for batch in self.batcher.batches(decoded, self.checkpoint):
                for future in self._explain_batch(batch, pool):
                    writing.add(future)
                    for record in writing.ready():
                        report(record)
            for record in writing.rest():
                report(record)
        except BaseException:
            decoded.close()  # the decoding queued ahead is dropped
            pool.shutdown(wait=True)  # every image whose maps are done is written
            for record in writing.finished():
                report(record)
            self.sequences.abort_all()  # no half video or map volume under its final name
            raise
        pool.shutdown(wait=True)
        for truth in (self.judge, self.regions):
            if truth is not None and (unmatched := truth.unmatched_notice(seen)):
                self.warn(unmatched)
        return summary

    def _told_truth(self, record: ImageRecord) -> ImageRecord:
        """The record with the input's true class, when the folder layout or the truth file says it."""
        truth = self.truth.of(Path(record.input)) if self.truth is not None else None
        return record.with_truth(truth.name, truth.index) if truth is not None else record

    def _named(self, sources: Iterable[Source]) -> Iterator[Item]:
        """Each input with its output name, claimed here in input order (the worker threads run out of order).

        The namer also learns each input as it streams by, so no output of this run replaces one.
        """
        for source in sources:
            self.namer.protect(source.path)
            base = self.namer.base_for(source.relative)
            if not source.error and (notice := self.namer.first_shortened(source.path, base)):
                self.warn(notice)
            yield Item(source, base, error=source.error)

    def _decode(self, item: Item) -> Item:
        """In a worker thread: the image read and prepared for the model (or why not, or skipped); a video's frame is
        decoded already."""
        source, base = item.source, item.base
        if item.error or item.end is not None or item.skipped:
            return item
        config = self.prepared.loaded.data_config
        if config.clip_length is not None and not isinstance(item.frame, (Clip, WholeVolume)):
            item.error = f"{source.path}: the model takes clips of {config.clip_length} frames (N×3×T×H×W): give it videos"
            return item
        try:
            if item.frame is not None:
                item.image = item.frame.image
            elif self.settings.outputs.skip_existing:
                item.existing = existing_outputs(
                    self.namer,
                    self.prepared.classes,
                    base,
                    self.writer.provenance,
                    save_raw=self.settings.outputs.save_raw,
                    save_guided=self.settings.outputs.save_guided,
                )
                if item.skipped:
                    return item
            if item.image is None:
                item.image = load_image(source.path, self.settings.inputs.max_pixels)
        except InputError as error:
            item.error = error.spelled(as_flag)
            return item
        height, width = item.image.shape[:2]
        if self.judge is not None:
            try:
                item.truth = self.judge.boxes(source.path, (height, width))
            except GradcamError as error:  # a true box outside its image: this image's error, the others go on
                item.error = f"{source.path}: {error.spelled(as_flag)}"
                return item
        item.geometry = plan_geometry((height, width), config, crop=self.settings.inputs.crop)
        if self.regions is not None and self.regions.needed:
            try:
                item.regions = self.regions.of(source.path, item.geometry)
            except GradcamError as error:  # a mask of another size, a box outside the image: its error, the others go on
                item.error = f"{source.path}: {error.spelled(as_flag)}"
                return item
        item.array = model_input(item, config)
        return item

    # ------------------------------------------------------------- one batch

    def _explain_batch(self, batch: list[Item], pool: ThreadPoolExecutor) -> Iterator[Future[object]]:
        """The maps of a batch computed here; each image's files handed to the pool as soon as its maps are known."""
        ready = [item for item in batch if item.ready]
        results = self.batcher.maps(ready) if ready else iter([])
        if self.judge is not None and ready:  # the whole batch's maps first: its misses are explained in one forward
            results = iter(self._judged(ready, list(results)))
        for item in batch:
            if item.end is not None:
                yield done(item.end)
                continue
            if item.existing is not None:
                yield done(self.writer.skipped_record(item.source.path, [str(p) for p in item.existing]))
                continue
            if item.error is None:
                result = next(results)
                if isinstance(result, str):
                    item.error = result
                else:
                    yield pool.submit(self._finish_safely, item, *result)
                    continue
            yield done(self._failed(item, item.error))

    def _failed(self, item: Item, message: str) -> ImageRecord | PictureDone:
        """An input's error record; a video frame's goes back to its video, shown there without a map."""
        record = self.writer.error_record(item.source.path, message)
        return record if item.frame is None else failed_pictures(item, record)

    def _judged(self, ready: list[Item], results: list[tuple[CamBatch, int] | str]) -> list[tuple[CamBatch, int] | str]:
        """The batch's detections judged against the truth (judge.py), its missed objects explained."""
        assert self.judge is not None
        done = [(item, *result) for item, result in zip(ready, results) if not isinstance(result, str)]
        self.judge.judge(done)
        return results

    def _finish_safely(self, item: Item, cams: CamBatch, row: int) -> ImageRecord | PictureDone:
        """In a worker thread: this image's files and record; a failure becomes its error record.

        A folder that cannot take files any more (full disk, read-only) stops the
        whole run instead: every following image would fail the same way.
        """
        try:
            assert item.image is not None and item.geometry is not None
            if item.frame is not None:
                return explained_pictures(self.writer, item, cams, row)
            return self.writer.finish(item.source.path, item.image, item.geometry, cams, row, item.base)
        except OSError as error:
            if error.errno in OUTPUT_FATAL_ERRNOS:
                raise OutputError(
                    f"cannot write to {self.settings.outputs.output_dir}: {error.strerror or error} "
                    "(files written so far are complete; free space or fix permissions, then re-run with --skip-existing)"
                ) from None
            return self._failed(item, f"{item.source.path}: {error}")
        except InputError as error:
            return self._failed(item, f"{item.source.path}: {error.spelled(as_flag)}")
        finally:
            item.image = item.array = None


def _judge(run: PreparedRun, settings: ExplainSettings, warn: Callable[[str], None]) -> TruthJudge:
    """A detector's truth and its judge, imported only for such a run (a classifier's run never loads the matching)."""
    from gradcam_cli.run.judge import TruthJudge

    assert settings.inputs.truth is not None
    return TruthJudge(run, settings.inputs.truth, settings.inputs.iou, warn)


def _nothing_found(record: ImageRecord, targets: object) -> str:
    """What a detector or a segmenter found nothing to explain in says, once a run."""
    if record.detections == []:
        threshold = getattr(targets, "score_threshold", 0.0)
        return (
            f"{record.input}: no detection scored {threshold:g} or more; its picture shows no box (and so for any other such "
            "image; lower ⟨score_threshold⟩ to explain weaker ones)"
        )
    if getattr(targets, "classes", ()):
        return (
            f"{record.input}: the model gives none of its pixels to the ⟨classes⟩ asked for; its picture shows no region (and so "
            "for any other such image; a ⟨region⟩ or ⟨mask⟩ explains a class where the model does not say it)"
        )
    return (
        f"{record.input}: no class covers {getattr(targets, 'min_area', 0.0):g} of it; its picture shows no region (and so for "
        "any other such image; lower ⟨min_area⟩, or name the ⟨classes⟩ to explain)"
    )


def _regions(run: PreparedRun) -> RegionReader:
    """A segmenter's named region and truth, imported only for such a run."""
    from gradcam_cli.run.regions import RegionReader

    return RegionReader(run)


def model_prints_to_stderr() -> contextlib.AbstractContextManager[object]:
    """What the model's code prints goes to stderr, so stdout carries the records only (JSON Lines).

    The console writes the records to the stream it was given at the start, not to `sys.stdout`,
    so its own lines are unaffected; a progress line on a terminal (rich) still shows the prints above it.
    """
    return contextlib.redirect_stdout(sys.stderr)


def _namer(run: PreparedRun) -> OutputNamer:
    """Output names: a class suffix when several classes are explained, wide enough for the largest index."""
    targets, outputs = run.classes, run.settings.outputs
    if targets is None:  # a detector: one picture per image, and with ⟨each⟩ one per detection
        largest = run.targets.count - 1 if outputs.each else None
        return OutputNamer(outputs.output_dir, run.method.name, None, outputs.save_raw, outputs.save_guided, largest_detection=largest)
    several = bool(targets.classes) or targets.topk > 1 or targets.by_threshold
    largest = max(targets.classes or [(run.num_outputs or 1) - 1]) if several else None
    return OutputNamer(outputs.output_dir, run.method.name, largest, outputs.save_raw, outputs.save_guided)
