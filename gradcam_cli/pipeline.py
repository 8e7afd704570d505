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
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

import numpy as np

from . import __version__
from .errors import GradcamError, InputError, OutputError, UsageError
from .images import DEFAULT_MAX_PIXELS, Colormap, load_image
from .models import free_device_memory, is_out_of_memory
from .outputs import ImageRecord, OutputNamer, ensure_writable
from .preprocess import Geometry, plan_geometry, to_input_array
from .sources import Source
from .workers import OrderedResults, default_workers, done, ordered_map
from .writer import ResultWriter

OUTPUT_FATAL_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS}

if TYPE_CHECKING:
    import torch

    from .cams import CamBatch, ProgressFn
    from .layers import ResolvedLayer
    from .methods import CamMethod
    from .models import LoadedModel
    from .targets import TargetChoice

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
        self.blank += bool(record.blank)


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
        progress: "ProgressFn | None" = None,
    ) -> None:
        from .cams import CamOptions
        from .layers import default_layer_paths, resolve_layers
        from .methods import get_method
        from .models import load_model, place_model, resolve_device, resolve_precision
        from .targets import target_choice

        self.settings = settings
        self.warn = warn
        self.method: CamMethod = get_method(settings.method)
        _check_method_options(settings, self.method, warn)
        self.device = resolve_device(settings.device)
        self.options = CamOptions(
            settings.relu, settings.norm, settings.combine, settings.eigen_smooth, settings.aug_smooth,
            settings.cam_batch_size, resolve_precision(settings.precision, self.device), progress,
        )
        self.loaded: LoadedModel = load_model(
            settings.model, pretrained=settings.pretrained, weights=settings.weights, labels=settings.labels
        )
        model = self.loaded.model
        paths = list(settings.layers) or default_layer_paths(model, self.loaded.arch, self.loaded.source)
        self.layers: list[ResolvedLayer] = resolve_layers(model, paths, self.loaded.name)
        self.targets: TargetChoice = target_choice(settings.classes, settings.topk, self.loaded.class_names)
        self.channels_last = place_model(model, self.device)
        self.model = model
        self.namer = OutputNamer(settings.output_dir, self.method.name)
        self.workers = settings.workers or default_workers(self.device.type)
        self.batch_limit = settings.batch_size  # lowered when the device runs out of memory
        self.writer = ResultWriter(
            self.namer, self.loaded.class_names, self._record_context(), warn,
            colormap=settings.colormap, alpha=settings.alpha, save_raw=settings.save_raw,
            save_guided=settings.save_guided, raw_norm=settings.norm != "minmax",
            explicit_classes=bool(self.targets.classes),
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
        if self.settings.skip_existing:
            item.existing = self._existing_outputs(base)
            if item.skipped:
                return item
        try:
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
        """--skip-existing: the overlays of an earlier run when every file this run would write is there, else None."""
        if self.targets.topk > 1 and not self.targets.classes:  # which classes only the forward would tell
            overlays = self.namer.existing_class_overlays(base)
            return overlays if len(overlays) >= self.targets.topk else None
        settings = self.settings
        expected = [
            self.namer.paths(base, c, settings.save_raw, settings.save_guided) for c in self.targets.classes or [None]
        ]
        if all(path.is_file() for paths in expected for path in paths if path is not None):
            return [paths[0] for paths in expected]
        return None

    # ------------------------------------------------------------- one batch

    def _explain_batch(self, batch: list[_Item], pool: ThreadPoolExecutor) -> "list[Future[ImageRecord]]":
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

    def _finish_safely(self, item: _Item, cams: "CamBatch", row: int) -> ImageRecord:
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

    def _compute_items(self, items: list[_Item]) -> "list[tuple[CamBatch, int] | str]":
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

    def compute(self, x: "torch.Tensor") -> "CamBatch":
        """The maps of a preprocessed batch (N, 3, H, W), computed as the run does (device, memory format)."""
        import torch

        from .cams import compute_cams

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


def _check_method_options(settings: ExplainSettings, method: "CamMethod", warn: Callable[[str], None]) -> None:
    """Options that only some methods use: refuse the impossible, say what is ignored."""
    if settings.save_guided and not method.guided:
        raise UsageError("--save-guided writes the guided backpropagation image; it needs --method guided-gradcam")
    if method.network_layers is not None and settings.layers:
        warn(f"{method.name} uses the input and every conv/batch-norm bias of the network; --layer is ignored")


__all__ = ["ExplainSettings", "Explainer", "Summary", "GradcamError"]
