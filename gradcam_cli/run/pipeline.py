"""The batch engine: sources → decoded batches → maps → files and records.

The model is built and its layers resolved once; images stream through in
batches of `batch_size`, decoded ahead by worker threads and written behind
by them (writer.py), so memory holds a window of images, never the folder. A
bad image becomes an error record and the rest go on; a bad layer or option
stops the run before any file is written.
"""
from __future__ import annotations

import errno
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any
from collections.abc import Callable, Iterable, Iterator

import numpy as np

from gradcam_cli import __version__
from gradcam_cli.errors import GradcamError, InputError, OutputError, UsageError
from gradcam_cli.outputs.images import DEFAULT_MAX_PIXELS, Colormap, is_complete, load_image
from gradcam_cli.model.load import free_device_memory, is_out_of_memory
from gradcam_cli.outputs.records import ImageRecord, OutputNamer, ensure_writable
from gradcam_cli.geometry import Geometry, plan_geometry, to_input_array
from gradcam_cli.inputs.sources import Source
from gradcam_cli.run.workers import OrderedResults, default_workers, done, ordered_map
from gradcam_cli.outputs.writer import ResultWriter

OUTPUT_FATAL_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS}

if TYPE_CHECKING:
    import torch

    from gradcam_cli.maps import CamBatch, ProgressFn
    from gradcam_cli.layers.paths import ResolvedLayer
    from gradcam_cli.cams.methods import CamMethod
    from gradcam_cli.model.load import LoadedModel
    from gradcam_cli.cams.targets import TargetChoice

@dataclass(frozen=True)
class ExplainSettings:
    """Everything a run needs, resolved from flags, a preset and defaults."""

    model: str
    pretrained: bool = True
    weights: Path | None = None
    labels: Path | None = None
    layers: tuple[str, ...] = ()
    method: str = "gradcam"
    classes: tuple[str, ...] = ()
    topk: int = 1
    crop: bool = False
    colormap: Colormap = Colormap.jet
    alpha: float = 0.5
    save_raw: bool = False
    batch_size: int = 8
    device: str = "auto"
    grid: tuple[int, int] | None = None
    output_dir: Path = Path("gradcam_out")
    recursive: bool = False
    relu: bool = True
    norm: str = "minmax"
    combine: str = "mean"
    eigen_smooth: bool = False
    aug_smooth: bool = False
    cam_batch_size: int = 32
    save_guided: bool = False
    workers: int = 0  # decode/write threads; 0 = automatic
    precision: str = "auto"
    max_pixels: int = DEFAULT_MAX_PIXELS
    skip_existing: bool = False


@dataclass
class Summary:
    done: int = 0
    failed: int = 0
    blank: int = 0
    skipped: int = 0  # --skip-existing: all outputs were there already

    @property
    def total(self) -> int:
        return self.done + self.failed + self.skipped

    def count(self, record: ImageRecord) -> None:
        if record.skipped:
            self.skipped += 1
        else:
            self.done += record.ok
            self.failed += not record.ok
        self.blank += any(target.blank for target in record.targets)


@dataclass
class _Item:
    """One input on its way through a batch."""

    source: Source
    base: PurePath  # the output name, claimed in input order
    existing: list[Path] | None = None  # --skip-existing: an earlier run's complete outputs
    image: np.ndarray | None = None
    geometry: Geometry | None = None
    array: np.ndarray | None = None
    error: str | None = None

    @property
    def skipped(self) -> bool:
        return self.existing is not None


class Explainer:
    """Holds the model once and explains a stream of sources."""

    def __init__(
        self, settings: ExplainSettings, warn: Callable[[str], None] = lambda _m: None,
        progress: ProgressFn | None = None, checkpoint: Callable[[], None] = lambda: None,
    ) -> None:
        from gradcam_cli.maps import CamOptions
        from gradcam_cli.layers.paths import default_layer_paths, resolve_layers
        from gradcam_cli.cams.methods import MethodKind, get_method
        from gradcam_cli.model.load import load_model, num_outputs, place_model, resolve_device, resolve_precision
        from gradcam_cli.cams.targets import target_choice

        self.settings = settings
        self.warn = warn
        self.checkpoint = checkpoint  # raises when the run is asked to stop (Ctrl-C); called between images
        self.method: CamMethod = get_method(settings.method)
        _check_method_options(settings, self.method, warn)
        self.device = resolve_device(settings.device)
        self.options = CamOptions(
            settings.relu, settings.norm, settings.combine, settings.eigen_smooth, settings.aug_smooth,
            settings.cam_batch_size, resolve_precision(settings.precision, self.device),
            _checked_progress(progress, checkpoint),
        )
        self.loaded: LoadedModel = load_model(
            settings.model, pretrained=settings.pretrained, weights=settings.weights, labels=settings.labels
        )
        model = self.loaded.model
        paths = list(settings.layers) or default_layer_paths(model, self.loaded.arch, self.loaded.source)
        self.layers: list[ResolvedLayer] = resolve_layers(model, paths, self.loaded.name)
        classes = num_outputs(model)
        self.notices: list[str] = []  # said once when the run starts, after every check has passed
        self.targets: TargetChoice = _fit_topk(
            target_choice(settings.classes, settings.topk, self.loaded.class_names), classes, self.notices.append
        )
        if not settings.pretrained and settings.weights is None:
            self.notices.append("--no-pretrained: random (seeded) weights; the classes and maps mean nothing "
                                "(useful only to try the tool or a layer path)")
        self.channels_last = place_model(model, self.device)
        self.model = model
        if self.method.kind == MethodKind.PERTURBATION:
            self.notices.append(self._perturbation_cost())
        several = bool(self.targets.classes) or self.targets.topk > 1
        largest = max(self.targets.classes or [(classes or 1) - 1]) if several else None
        self.namer = OutputNamer(settings.output_dir, self.method.name, largest, settings.save_raw, settings.save_guided)
        self.workers = settings.workers or default_workers(self.device.type)
        self.batch_limit = settings.batch_size  # lowered when the device runs out of memory
        self.writer = ResultWriter(
            self.namer, self.loaded.class_names, self._record_context(),
            colormap=settings.colormap, alpha=settings.alpha, save_raw=settings.save_raw,
            save_guided=settings.save_guided, raw_norm=settings.norm != "minmax",
            explicit_classes=bool(self.targets.classes),
        )

    def _perturbation_cost(self) -> str:
        """scorecam and ablationcam run one forward per channel of the layer: say what that costs, before it does."""
        import torch

        from gradcam_cli.extract.perturb import measure_cost

        chunk = min(self.settings.cam_batch_size, 8)
        x = torch.zeros(chunk, 3, *self.loaded.data_config.input_hw, device=self.device)
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        cost = measure_cost(self.model, self.layers, x)
        layers = ", ".join(f"{name}: {count:,} channels" for name, count in cost.channels.items())
        return (
            f"{self.method.name} runs {cost.forwards_per_image:,} masked forwards per image ({layers}), about "
            f"{_duration(cost.seconds_per_image)} per image on {self.device}; cheaper: --method gradcam "
            "(one backward), a --layer with fewer channels, or a GPU"
        )

    def _layer_names(self) -> list[str]:
        """The layers the maps come from, as the records report them."""
        if self.method.network_layers is not None:
            count = len(self.method.network_layers(self.model))
            return [f"input + {count} bias layers (whole network)"]
        return [layer.name for layer in self.layers]

    # ------------------------------------------------------------- streaming

    def run(self, sources: Iterable[Source], emit: Callable[[ImageRecord], None]) -> Summary:
        """Decode ahead and write behind in worker threads; the model runs in this one.

        Records come out in input order, each as soon as its files are written.
        On an interruption or an output failure, images being written are
        finished, queued work is dropped, and the records of what was written
        still come out before the error goes up.
        """
        summary = Summary()

        def report(record: ImageRecord) -> None:
            summary.count(record)
            emit(record)

        ensure_writable(self.settings.output_dir)
        for notice in self.notices:
            self.warn(notice)
        window = 2 * self.settings.batch_size
        pool = ThreadPoolExecutor(self.workers, thread_name_prefix="gradcam-io")
        writing = OrderedResults(limit=window)
        try:
            decoded = ordered_map(pool, self._decode, self._named(sources), window)
            for batch in self._batches(decoded):
                for future in self._explain_batch(batch, pool):
                    writing.add(future)
                for record in writing.ready():
                    report(record)  # type: ignore[arg-type]
            for record in writing.rest():
                report(record)  # type: ignore[arg-type]
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)  # writes in progress complete; nothing new starts
            for record in writing.finished():
                report(record)  # type: ignore[arg-type]
            raise
        pool.shutdown(wait=True)
        return summary

    def _named(self, sources: Iterable[Source]) -> Iterator[tuple[Source, PurePath]]:
        """Each input with its output name, claimed here in input order (the worker threads run out of order).

        The namer also learns each input as it streams by, so no output of this run replaces one.
        """
        for source in sources:
            self.namer.protect(source.path)
            yield source, self.namer.base_for(source.relative)

    def _batches(self, items: Iterable[_Item]) -> Iterator[list[_Item]]:
        """Decoded items, grouped so each batch holds as many images that can run as the batch size allows."""
        batch: list[_Item] = []
        ready = 0
        for item in items:
            self.checkpoint()
            batch.append(item)
            ready += item.error is None and not item.skipped
            if ready >= self.batch_limit:
                yield batch
                batch, ready = [], 0
        if batch:
            yield batch

    def _decode(self, named: tuple[Source, PurePath]) -> _Item:
        """In a worker thread: the image read and prepared for the model (or why not, or skipped)."""
        source, base = named
        item = _Item(source, base)
        if source.error:
            item.error = source.error
            return item
        try:
            self.namer.check(base)
            if self.settings.skip_existing:
                item.existing = self._existing_outputs(base)
                if item.skipped:
                    return item
            item.image = load_image(source.path, self.settings.max_pixels)
        except InputError as error:
            item.error = str(error)
            return item
        height, width = item.image.shape[:2]
        config = self.loaded.data_config
        item.geometry = plan_geometry((height, width), config, crop=self.settings.crop)
        item.array = to_input_array(item.image, item.geometry, config)
        return item

    def _existing_outputs(self, base: PurePath) -> list[Path] | None:
        """--skip-existing: an earlier run's overlays when every file this run would write is there whole, else None.

        With --topk K the classes are known only after the forward: any K
        classes whose files are all complete will do.
        """
        settings = self.settings
        if self.targets.topk > 1 and not self.targets.classes:
            classes: list[int | None] = self.namer.existing_classes(base)
            wanted = self.targets.topk
        else:
            classes, wanted = list(self.targets.classes or [None]), len(self.targets.classes or [None])
        complete = []
        for index in classes:
            paths = [p for p in self.namer.paths(base, index, settings.save_raw, settings.save_guided) if p is not None]
            if all(is_complete(p) for p in paths):
                complete.append(paths[0])
        return complete[:wanted] if len(complete) >= wanted else None

    # ------------------------------------------------------------- one batch

    def _explain_batch(self, batch: list[_Item], pool: ThreadPoolExecutor) -> list[Future[ImageRecord]]:
        """The maps of a batch computed here; each image's files written by the pool."""
        ready = [item for item in batch if item.error is None and not item.skipped]
        results = iter(self._compute_items(ready) if ready else [])
        futures = []
        for item in batch:
            if item.existing is not None:
                futures.append(done(self.writer.skipped_record(item.source.path, [str(p) for p in item.existing])))
                continue
            if item.error is None:
                result = next(results)
                if isinstance(result, str):
                    item.error = result
                else:
                    futures.append(pool.submit(self._finish_safely, item, *result))
                    continue
            futures.append(done(self.writer.error_record(item.source.path, item.error)))
        return futures

    def _finish_safely(self, item: _Item, cams: CamBatch, row: int) -> ImageRecord:
        """In a worker thread: this image's files and record; a failure becomes its error record.

        A folder that cannot take files any more (full disk, read-only) stops the
        whole run instead: every following image would fail the same way.
        """
        try:
            assert item.image is not None and item.geometry is not None
            return self.writer.finish(item.source.path, item.image, item.geometry, cams, row, item.base)
        except OSError as error:
            if error.errno in OUTPUT_FATAL_ERRNOS:
                raise OutputError(
                    f"cannot write to {self.settings.output_dir}: {error.strerror or error} "
                    "(files written so far are complete; free space or fix permissions, then re-run with --skip-existing)"
                ) from None
            return self.writer.error_record(item.source.path, f"{item.source.path}: {error}")
        except InputError as error:
            return self.writer.error_record(item.source.path, f"{item.source.path}: {error}")
        finally:
            item.image = item.array = None

    def _compute_items(self, items: list[_Item]) -> list[tuple[CamBatch, int] | str]:
        """Per item its maps (batch, row), or why it failed.

        A batch that runs out of device memory is split in halves, down to one
        image, and later batches stay at the size that worked; an image that does
        not fit alone gets an error and the rest go on.
        """
        import torch

        try:
            cams = self.compute(torch.from_numpy(np.stack([item.array for item in items]))).to_cpu()
            return [(cams, row) for row in range(len(items))]
        except Exception as error:  # noqa: BLE001 - only out-of-memory is handled, the rest goes up
            if not is_out_of_memory(error):
                raise
            free_device_memory(self.device)
        if len(items) == 1:
            return [f"{items[0].source.path}: out of memory on {self.device} even for this image alone; "
                    "try --precision bf16, a smaller model or --device cpu"]
        half = len(items) // 2
        self.batch_limit = min(self.batch_limit, half)
        self.warn(f"out of memory on {self.device} with {len(items)} images at once; retrying with {half}")
        return self._compute_items(items[:half]) + self._compute_items(items[half:])

    def compute(self, x: torch.Tensor) -> CamBatch:
        """The maps of a preprocessed batch (N, 3, H, W), computed as the run does (device, memory format)."""
        import torch

        from gradcam_cli.cams.engine import compute_cams

        x = x.to(self.device, non_blocking=True)
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return compute_cams(
            self.model,
            x,
            self.layers,
            self.method,
            self.targets,
            num_prefix_tokens=self.loaded.num_prefix_tokens,
            grid=self.settings.grid,
            model_name=self.loaded.name,
            options=self.options,
        )

    def _record_context(self) -> dict[str, Any]:
        """What every record of this run repeats, so a run can be reproduced from any line of its output."""
        settings, options = self.settings, self.options
        return {
            "model": self.loaded.name,
            "layers": self._layer_names(),
            "method": self.method.name,
            "device": str(self.device),
            "settings": {
                "preprocess": "crop" if settings.crop else "whole",
                "relu": settings.relu,
                "norm": str(getattr(settings.norm, "value", settings.norm)),
                "combine": str(getattr(settings.combine, "value", settings.combine)),
                "eigen_smooth": settings.eigen_smooth,
                "aug_smooth": settings.aug_smooth,
                "precision": str(options.precision or "fp32").replace("torch.", ""),
                "pretrained": settings.pretrained and settings.weights is None,
                "weights": str(settings.weights) if settings.weights else None,
                "version": __version__,
            },
        }


def _checked_progress(progress: ProgressFn | None, checkpoint: Callable[[], None]) -> ProgressFn:
    """Masked forwards report after each chunk: a stop request is honoured there too, not after minutes."""

    def report(what: str, done: int, total: int) -> None:
        checkpoint()
        if progress is not None:
            progress(what, done, total)

    return report


def _duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds:.2f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min"


def _fit_topk(targets: TargetChoice, classes: int | None, warn: Callable[[str], None]) -> TargetChoice:
    """--topk above the number of classes explains every class, and says so once."""
    from gradcam_cli.cams.targets import TargetChoice

    if classes is None or targets.classes or targets.topk <= classes:
        return targets
    warn(f"--topk {targets.topk}: the model has only {classes} classes; explaining all {classes}")
    return TargetChoice(topk=classes)


def _check_method_options(settings: ExplainSettings, method: CamMethod, warn: Callable[[str], None]) -> None:
    """Options that only some methods use: refuse the impossible, say what is ignored."""
    if settings.save_guided and not method.guided:
        raise UsageError("--save-guided writes the guided backpropagation image; it needs --method guided-gradcam")
    if method.network_layers is not None and settings.layers:
        warn(f"{method.name} uses the input and every conv/batch-norm bias of the network; --layer is ignored")


__all__ = ["ExplainSettings", "Explainer", "Summary", "GradcamError"]
