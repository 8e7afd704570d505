"""`gradcam eval`'s engine: each batch's maps by every method, the baselines beside them, every metric, a record each.

The model is loaded once and every method prepared on it (run/prepare.py), so
a bad method, layer or option stops the run before any image is read. Images
are decoded ahead in threads and go through in batches. The first method's
maps say what a batch's units are (run/evaluation_units.py: a classifier's
image with its top class or the one ⟨classes⟩; a detector's kept detections),
and every map set explains those units, so all answer the same question; a
record per unit and map set. A bad image gets an error record and
the others go on; a batch that runs out of memory is halved. Progress is
counted as the work is done, not only when a batch's records come out: each
step of a batch (a method's maps, a map set's scores, a step of the sanity
check) is its share of the batch's images.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from gradcam_cli.errors import InputError, UsageError
from gradcam_cli.evaluate import baselines
from gradcam_cli.evaluate.measures import measures_of
from gradcam_cli.evaluate.scoring import MapScores, Scoring, score_maps
from gradcam_cli.evaluate.summary import EvalTotals
from gradcam_cli.geometry import map_to_original, plan_geometry, to_input_array
from gradcam_cli.inputs.decode import load_image
from gradcam_cli.inputs.sources import Source
from gradcam_cli.inputs.truth import ClassIndex
from gradcam_cli.layers.paths import resolve_layers
from gradcam_cli.outputs.records import EvalRecord, TargetRecord
from gradcam_cli.run.evaluation_extras import Extras, Measured
from gradcam_cli.run.evaluation_units import BatchMaps, Decoded, Units, eval_units
from gradcam_cli.run.prepare import PreparedRun, prepare_run
from gradcam_cli.run.workers import default_workers, ordered_map
from gradcam_cli.settings import ExplainSettings
from gradcam_cli.option_words import as_flag, in_flags
from gradcam_cli.vocab import Method, Norm

BASELINES = ("random", "centre", "edges")  # model-blind maps set beside every method
Progress = Callable[[float, str], None]  # the images' worth of work done so far, and what the run is at now


@dataclass(frozen=True, kw_only=True)
class EvalPlan:
    """What `gradcam eval` measures, beyond the options it shares with explain."""

    methods: tuple[str, ...]
    scoring: Scoring  # its metrics: those asked for, or with `default_metrics` the defaults, to which the task adds its own
    boxes: Path | None = None  # the objects, for the pointing game
    overlays: bool = False  # each map set's overlay written (for the report)
    default_metrics: bool = False  # no metric was named: the task adds its defaults (pointing with boxes; a detector's own)


def baseline_maps(x: torch.Tensor, inputs: list[str]) -> dict[str, torch.Tensor]:
    """The three baselines of a batch, at the input size; the random map seeded by each input's name, so reruns agree."""
    n, _, height, width = x.shape
    seeds = [zlib.crc32(name.encode("utf-8", "surrogateescape")) for name in inputs]
    noise = torch.cat([baselines.random_maps(1, height, width, seed=seed) for seed in seeds])
    return {
        "random": noise.to(x.device),
        "centre": baselines.centre_gaussian(n, height, width).to(x.device),
        "edges": baselines.sobel_edges(x).to(x.device),
    }


class Work:
    """How far an evaluation is, in images' worth: a finished or failed image counts 1, and each step of a batch its share
    of the batch's images as it finishes, so a progress line moves through a long batch instead of jumping at its end."""

    def __init__(self, report: Progress) -> None:
        self.report, self.done = report, 0.0
        self.size, self.steps, self.finished = 0, 1, 0

    def begin(self, size: int, steps: int) -> None:
        """A batch of `size` images starts, its work in `steps` steps (a batch retried after running out of memory starts over)."""
        self.size, self.steps, self.finished = size, max(1, steps), 0

    def step(self, what: str) -> None:
        """The next step of the batch starts: what is done so far, and what it is at."""
        shown = f"{what} ({self.finished + 1}/{self.steps} of a batch of {self.size})"
        self.report(self.done + self.size * min(self.finished, self.steps) / self.steps, shown)
        self.finished += 1

    def end(self, count: int) -> None:
        """`count` images are done: a batch's, or one that failed on its own."""
        self.done += count
        self.report(self.done, "")


class Evaluator:
    """A prepared evaluation: the model and every method once; then any stream of sources."""

    def __init__(
        self,
        settings: ExplainSettings,
        plan: EvalPlan,
        warn: Callable[[str], None] = lambda _m: None,
        checkpoint: Callable[[], None] = lambda: None,
        progress: Progress = lambda _done, _what: None,
    ) -> None:
        self.settings, self.plan = settings, plan
        self.work = Work(progress)
        self.warn = lambda message: warn(in_flags(message))
        self.checkpoint = checkpoint
        self.runs = self._prepare(settings, plan.methods)
        first = self.runs[0]
        self.model, self.device, self.loaded = first.model, first.device, first.loaded
        self.task = eval_units(first)
        self.target = first.kind.value  # what the maps explain, as each record says it
        self.task.check(settings)
        metrics = self.task.metrics(plan.scoring.metrics, plan.default_metrics, plan.boxes)
        self.scoring = replace(
            plan.scoring, metrics=metrics, checkpoint=checkpoint, precision=first.options.precision, channels_last=first.channels_last
        )
        self.extras = Extras(self, metrics, plan.boxes)
        self.totals = EvalTotals(measures_of(metrics, self.task.own_measures))
        self.classes = ClassIndex(self.loaded.class_names)
        self.said_empty = False

    def _prepare(self, settings: ExplainSettings, methods: tuple[str, ...]) -> list[PreparedRun]:
        """One prepared run per method on the one model; maps always scaled to [0, 1] (the metrics multiply by them)."""
        if not methods:
            raise UsageError("no method to evaluate; name some with ⟨methods⟩")
        runs: list[PreparedRun] = []
        said: set[str] = set()
        for name in methods:
            own = replace(settings, target=replace(settings.target, method=Method(name)), maps=replace(settings.maps, norm=Norm.minmax))
            shared = {"loaded": runs[0].loaded, "device": runs[0].device} if runs else {}
            run = prepare_run(own, warn=self.warn, checkpoint=self.checkpoint, **shared)  # type: ignore[arg-type]
            for notice in run.notices:
                if notice not in said:
                    said.add(notice)
                    self.warn(notice)
            runs.append(run)
        return runs

    def context(self) -> dict[str, object]:
        """What eval.json and the runs file say of the run."""
        return {
            "model": self.loaded.name,
            "source": self.loaded.source.name,
            "methods": [run.method.name for run in self.runs],
            "baselines": list(BASELINES),
            "layers": {run.method.name: run.layer_names() for run in self.runs},
            "unit": self.task.unit,
            "score": self.task.score,
            "metrics": [metric.value for metric in self.scoring.metrics],
            "steps": self.plan.scoring.steps,
            "substrate": self.plan.scoring.substrate.value,
            "device": str(self.device),
        }

    def run(self, sources: Iterable[Source], emit: Callable[[EvalRecord], None]) -> None:
        """Evaluate every source; each record goes to `emit` (and into the totals) as it is made."""

        def out(record: EvalRecord) -> None:
            self.totals.add(record.__dict__)
            emit(record)

        workers = self.settings.run.workers or default_workers(self.device.type)
        batch: list[Decoded] = []
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gradcam-eval") as pool:
            for decoded in ordered_map(pool, self._decode, sources, window=2 * self.settings.run.batch_size):
                self.checkpoint()
                if isinstance(decoded, EvalRecord):
                    out(decoded)
                    self.work.end(1)
                    continue
                batch.append(decoded)
                if len(batch) == self.settings.run.batch_size:
                    self._flush(batch, out)
                    batch = []
            self._flush(batch, out)

    def _flush(self, batch: list[Decoded], out: Callable[[EvalRecord], None]) -> None:
        for record in self._evaluate(batch) if batch else []:
            out(record)

    def _decode(self, source: Source) -> Decoded | EvalRecord:
        """The image read and preprocessed as explain does; an unreadable one is its error record."""
        try:
            if source.error:
                raise InputError(source.error)
            photo = load_image(source.path, self.settings.inputs.max_pixels)
            config = self.loaded.data_config
            geometry = plan_geometry(photo.shape[:2], config, crop=self.settings.inputs.crop)
            return Decoded(source, photo, geometry, to_input_array(photo, geometry, config))
        except InputError as error:
            return EvalRecord(input=str(source.path), ok=False, error=error.spelled(as_flag), model=self.loaded.name)

    def _evaluate(self, batch: list[Decoded]) -> list[EvalRecord]:
        """The batch's records; out of memory, each half on its own, down to one image (then its error record)."""
        try:
            return self._evaluate_batch(batch)
        except torch.OutOfMemoryError:
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            if len(batch) == 1:
                message = f"{batch[0].source.path}: out of memory on {self.device}; try a smaller ⟨cam_batch_size⟩ or the CPU"
                self.work.end(1)
                return [EvalRecord(input=str(batch[0].source.path), ok=False, error=in_flags(message), model=self.loaded.name)]
            self.warn(f"out of memory on {self.device} with {len(batch)} images; halving the batch")
            half = len(batch) // 2
            return self._evaluate(batch[:half]) + self._evaluate(batch[half:])

    def _evaluate_batch(self, batch: list[Decoded]) -> list[EvalRecord]:
        x = torch.from_numpy(np.stack([item.array for item in batch])).to(self.device)
        self.work.begin(len(batch), steps=len(self.runs) * 2 + len(BASELINES) + self.extras.steps(x))
        sets = self._method_maps(x, batch)
        units = sets.units
        scores: dict[str, MapScores] = {}
        extra = Measured()
        if len(units):
            on_units = x[units.image.to(x.device)]
            baselines_of = baseline_maps(x, [str(item.source.path) for item in batch])
            sets.maps.update({name: maps[units.image.to(maps.device)] for name, maps in baselines_of.items()})
            scores = {}
            for name, maps in sets.maps.items():
                self.work.step(f"scoring {name}'s maps")
                scores[name] = score_maps(self.model, on_units, maps, sets.scorer, self.scoring)
            extra = self.extras.measure(x, batch, sets)
        records = []
        for row, item in enumerate(batch):
            mine = units.of(row)
            if not mine:
                records.append(self._nothing_to_measure(item))
            records += [self._record(item, unit, name, scores[name], extra, sets) for unit in mine for name in sets.maps]
        self.work.end(len(batch))
        return records

    def _method_maps(self, x: torch.Tensor, batch: list[Decoded]) -> BatchMaps:
        """Each method's maps (U, H, W) of the batch, a map per unit: all for the units of the first method's maps."""
        first = self.runs[0].compute(x)
        units = self.task.units(first, batch)
        sets = BatchMaps(maps={}, blank={}, finite={}, units=units, scorer=self.task.scorer(units), logits=first.logits.float())
        if not len(units):
            return sets
        again = self.task.targets(units, len(batch))
        for run in self.runs:
            self.work.step(f"{run.method.name}'s maps")
            cams = first if run is self.runs[0] else replace(run, targets=again).compute(x)
            name = run.method.name
            sets.maps[name] = _per_unit(cams.maps, units).float().nan_to_num()
            sets.blank[name], sets.finite[name] = _per_unit(cams.blank, units), cams.finite[units.image.to(cams.finite.device)]
        return sets

    def maps_with(self, net: torch.nn.Module, x: torch.Tensor, units: Units) -> dict[str, torch.Tensor]:
        """Each method's maps of the units computed with another network of the same architecture (the sanity check's copies)."""
        out = {}
        again = self.task.targets(units, len(x))
        for run in self.runs:
            layers = resolve_layers(net, [layer.name for layer in run.layers], self.loaded.name)
            on_net = replace(run, loaded=replace(run.loaded, model=net), layers=layers, targets=again)
            out[run.method.name] = _per_unit(on_net.compute(x).maps, units).float().nan_to_num()
        return out

    def _nothing_to_measure(self, item: Decoded) -> EvalRecord:
        """An image without a unit (a detector's with no detection kept): an ok record of no map set, said once a run."""
        if not self.said_empty:
            self.said_empty = True
            self.warn(f"{item.source.path}: nothing to evaluate in it (no {self.task.unit} kept), and so for any other such image")
        return EvalRecord(input=str(item.source.path), ok=True, model=self.loaded.name, width=int(item.photo.shape[1]),
                          height=int(item.photo.shape[0]))  # fmt: skip

    def _record(self, item: Decoded, unit: int, name: str, scores: MapScores, extra: Measured, sets: BatchMaps) -> EvalRecord:
        """One unit's record for one map set: what it explains, every measure, its curves, its overlay when asked."""
        path = str(item.source.path)
        baseline = name in BASELINES
        if not baseline and not bool(sets.finite[name][unit]):
            error = f"{path}: the model's scores or gradients are not finite (NaN or inf) for {name}"
            return EvalRecord(input=path, ok=False, error=error, model=self.loaded.name, method=name)
        said = self.task.describe(sets, unit, item, self.classes.names)
        is_blank = bool(sets.blank[name][unit]) if not baseline else False
        metrics = {key: values[unit] for key, values in scores.measures.items()}
        metrics.update(extra.measures_of(name, unit))
        targets = []
        if self.plan.overlays:
            overlay = self.extras.write_overlay(item, name, sets.maps[name][unit], said, self.task.largest_detection)
            targets = [TargetRecord(said.class_index, said.class_name, said.score, said.probability, is_blank, overlay=overlay)]
        run = next((run for run in self.runs if run.method.name == name), None)
        return EvalRecord(
            input=path, ok=True, model=self.loaded.name, method=name, baseline=baseline, layers=run.layer_names() if run else [],
            width=int(item.photo.shape[1]), height=int(item.photo.shape[0]), class_index=said.class_index,
            class_name=said.class_name, probability=said.probability, score=said.score, target=self.target, blank=is_blank,
            topk=said.topk, metrics=metrics, fractions=scores.fractions, curves={key: rows[unit] for key, rows in scores.curves.items()},
            sanity=extra.sanity_of(name, unit), targets=targets, detection=said.detection, box=said.box, segment=said.segment,
            region=said.region,
        )  # fmt: skip

    def photo_map(self, item: Decoded, cam: torch.Tensor) -> np.ndarray:
        """A map at the input size, put back on the photo as explain's `.npy` is."""
        return map_to_original(cam.detach().float().cpu(), item.geometry)

    def class_matches(self, written: str, index: int) -> bool:
        """A box's class (a name or an index, as the boxes file writes it) is the explained class."""
        return self.classes.find(written) == index if self.classes.names else written.strip() == str(index)


def _per_unit(values: torch.Tensor, units: Units) -> torch.Tensor:
    """A batch's (N, K, ...) values by rank, as one row per unit (U, ...)."""
    return values[units.image.to(values.device), units.rank.to(values.device)]
