"""The batch engine: sources → decoded batches → maps → files and records.

The model is built and its layers resolved once; images stream through in
batches of `batch_size`, decoded ahead by worker threads and written behind
by them (writer.py), so memory holds a window of images, never the folder. A
bad image becomes an error record and the rest go on; a bad layer or option
stops the run before any file is written.
"""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

import numpy as np

from . import __version__
from .errors import GradcamError, InputError
from .images import DEFAULT_MAX_PIXELS, Colormap, load_image
from .outputs import ImageRecord, OutputNamer
from .preprocess import Geometry, plan_geometry, to_input_array
from .sources import Source
from .workers import OrderedResults, default_workers, done, ordered_map
from .writer import ResultWriter

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


@dataclass
class Summary:
    done: int = 0
    failed: int = 0
    blank: int = 0

    @property
    def total(self) -> int:
        return self.done + self.failed


@dataclass
class _Item:
    """One input on its way through a batch."""

    source: Source
    image: np.ndarray | None = None
    geometry: Geometry | None = None
    array: np.ndarray | None = None
    error: str | None = None
    warnings: list[str] = field(default_factory=list)


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
        """
        summary = Summary()

        def report(record: ImageRecord) -> None:
            summary.done += record.ok
            summary.failed += not record.ok
            summary.blank += bool(record.blank)
            emit(record)

        window = 2 * self.settings.batch_size
        with ThreadPoolExecutor(self.workers, thread_name_prefix="gradcam-io") as pool:
            writing = OrderedResults(limit=window)
            decoded = ordered_map(pool, self._decode, self._protected(sources), window)
            for batch in self._batches(decoded):
                for future in self._explain_batch(batch, pool):
                    writing.add(future)
                for record in writing.ready():
                    report(record)  # type: ignore[arg-type]
            for record in writing.rest():
                report(record)  # type: ignore[arg-type]
        return summary

    def _protected(self, sources: Iterable[Source]) -> Iterator[Source]:
        """Tell the namer each input as it streams by, so no output of this run replaces one."""
        for source in sources:
            self.namer.protect(source.path)
            yield source

    def _batches(self, items: Iterable[_Item]) -> Iterator[list[_Item]]:
        """Decoded items, grouped so each batch holds `batch_size` images that can run."""
        batch: list[_Item] = []
        ready = 0
        for item in items:
            batch.append(item)
            ready += item.error is None
            if ready >= self.settings.batch_size:
                yield batch
                batch, ready = [], 0
        if batch:
            yield batch

    def _decode(self, source: Source) -> _Item:
        item = _Item(source)
        if source.error:
            item.error = source.error
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

    # ------------------------------------------------------------- one batch

    def _explain_batch(self, batch: list[_Item], pool: ThreadPoolExecutor) -> "list[Future[ImageRecord]]":
        """The maps of a batch computed here; each image's files written by the pool."""
        ready = [item for item in batch if item.error is None]
        cams = self._compute(ready).to_cpu() if ready else None
        futures = []
        position = {id(item): i for i, item in enumerate(ready)}
        for item in batch:
            if item.error is not None:
                futures.append(done(self.writer.error_record(item.source.path, item.error)))
                continue
            base = self.namer.base_for(item.source.relative)  # claimed here: names follow input order
            futures.append(pool.submit(self._finish_safely, item, cams, position[id(item)], base))
        return futures

    def _finish_safely(self, item: _Item, cams: "CamBatch", row: int, base: PurePath) -> ImageRecord:
        """In a worker thread: this image's files and record; a failure becomes its error record."""
        try:
            assert item.image is not None and item.geometry is not None
            return self.writer.finish(item.source.path, item.image, item.geometry, cams, row, base)
        except (InputError, OSError) as error:
            return self.writer.error_record(item.source.path, f"{item.source.path}: {error}")
        finally:
            item.image = item.array = None

    def _compute(self, items: list[_Item]) -> "CamBatch":
        import torch

        return self.compute(torch.from_numpy(np.stack([item.array for item in items])))

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
    from .errors import UsageError

    if settings.save_guided and not method.guided:
        raise UsageError("--save-guided writes the guided backpropagation image; it needs --method guided-gradcam")
    if method.network_layers is not None and settings.layers:
        warn(f"{method.name} uses the input and every conv/batch-norm bias of the network; --layer is ignored")


def explain(settings: ExplainSettings, sources: Iterable[Source], emit: Callable[[ImageRecord], None],
            warn: Callable[[str], None]) -> Summary:
    """Build the explainer once and run every source through it."""
    return Explainer(settings, warn).run(sources, emit)


__all__ = ["ExplainSettings", "Explainer", "Summary", "explain", "GradcamError"]
