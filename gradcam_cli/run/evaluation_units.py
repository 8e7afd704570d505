"""What one unit of `gradcam eval` is, per task: a classifier's image (its class), or one kept detection of a detector.

The evaluator (run/evaluation.py) asks this seam, as a run asks run/tasks.py,
and never branches on the task: which units the first method's maps of a
batch explain, what the other methods and the sanity check's randomised
copies explain so that every map set answers the same question, what each
perturbed input is scored for (evaluate/faithfulness.py's Scorer: a class's
probability, or a detection's score read by evaluate/detection_scoring.py's
rule), which metrics apply and which run by default, the measures only a task
has (a detection's energy in its box and its pointing game, against its own
box), and what a record says of a unit. A unit is one record per map set.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import torch
from torch import nn

from gradcam_cli.cams.detections import Lost, MissedTargets
from gradcam_cli.cams.targets import TargetChoice, Targets
from gradcam_cli.errors import UsageError
from gradcam_cli.evaluate.detection_scoring import DetectionScores
from gradcam_cli.evaluate.faithfulness import ClassScores, Scorer
from gradcam_cli.geometry import boxes_to_original
from gradcam_cli.maps import CamBatch
from gradcam_cli.maps import probabilities as class_probabilities
from gradcam_cli.outputs.boxes import DrawnBox
from gradcam_cli.outputs.detection_files import in_box, label_of
from gradcam_cli.outputs.records import class_name as name_of
from gradcam_cli.outputs.writer import topk_entries
from gradcam_cli.run.evaluation_parts import BatchMaps, Decoded, Described, OwnMeasures, PhotoMap, Units, own_place_metrics
from gradcam_cli.vocab import Metric, TargetKind, Task

if TYPE_CHECKING:
    from gradcam_cli.geometry import Geometry
    from gradcam_cli.run.prepare import PreparedRun
    from gradcam_cli.settings import ExplainSettings


class EvalUnits(Protocol):
    """One task's part in an evaluation."""

    unit: str  # what a unit is, in words ("image", "detection")
    score: str  # what the curves follow, in words (the charts' axis)
    own_measures: frozenset[str]  # the measures only this task has (evaluate/measures.TASK_MEASURES)
    largest_detection: int | None  # the highest `.detN` an overlay's name can carry; None: no detection in names

    def check(self, settings: ExplainSettings) -> None:
        """Refuse, in one line, target options the evaluation cannot take for this task."""

    def metrics(self, asked: Sequence[Metric], defaulted: bool, boxes: Path | None) -> tuple[Metric, ...]:
        """The metrics run: those asked for (`defaulted`: the default ones), with the task's own defaults; the ones that
        do not apply refused in one line each."""

    def units(self, first: CamBatch, batch: Sequence[Decoded]) -> Units:
        """The units of a batch, from the first method's maps."""

    def targets(self, units: Units, rows: int) -> Targets:
        """What every other method (and the sanity check's copies) explains: the first method's units again."""

    def scorer(self, units: Units) -> Scorer:
        """What each unit's perturbed inputs are scored for."""

    def measure(self, metrics: Sequence[Metric], batch: Sequence[Decoded], sets: BatchMaps, photo_map: PhotoMap) -> OwnMeasures:
        """The task's own measures: per map set, per measure, a value per unit."""

    def describe(self, sets: BatchMaps, unit: int, item: Decoded, names: Sequence[str] | None) -> Described:
        """What the records of one unit say of it."""


class ClassifyUnits:
    """A classifier: a unit per image, the first method's top class (or the one ⟨classes⟩), scored by its probability."""

    unit = "image"
    score = "class probability"
    largest_detection: int | None = None
    own_measures: frozenset[str] = frozenset()

    def check(self, settings: ExplainSettings) -> None:
        if len(settings.target.classes) > 1:
            raise UsageError("an evaluation explains one class per image: give ⟨classes⟩ once (or not at all, for the top class)")

    def metrics(self, asked: Sequence[Metric], defaulted: bool, boxes: Path | None) -> tuple[Metric, ...]:
        chosen = set(asked) | ({Metric.pointing} if defaulted and boxes is not None else set())
        if Metric.energy in chosen:
            raise UsageError(
                "⟨metrics⟩ energy is a detector's: the share of each detection's map inside its own box; a classifier's maps are "
                "measured against the objects' boxes by the pointing game (⟨boxes⟩)"
            )
        if Metric.pointing in chosen and boxes is None:
            raise UsageError("the pointing game needs to know where the objects are: give ⟨boxes⟩ (a CSV or JSON file, or mask PNGs)")
        return tuple(metric for metric in Metric if metric in chosen)

    def units(self, first: CamBatch, batch: Sequence[Decoded]) -> Units:
        rows = torch.arange(len(batch))
        return Units(image=rows, rank=torch.zeros_like(rows), classes=first.targets[:, 0].cpu().long())

    def targets(self, units: Units, rows: int) -> Targets:
        return TargetChoice(classes=tuple(int(c) for c in units.classes.tolist()), per_image=True)

    def scorer(self, units: Units) -> Scorer:
        return ClassScores(units.classes)

    def measure(self, metrics: Sequence[Metric], batch: Sequence[Decoded], sets: BatchMaps, photo_map: PhotoMap) -> OwnMeasures:
        return {}  # the pointing game against ⟨boxes⟩ is the extras' (run/evaluation_extras.py)

    def describe(self, sets: BatchMaps, unit: int, item: Decoded, names: Sequence[str] | None) -> Described:
        row, index = int(sets.units.image[unit]), int(sets.units.classes[unit])
        probabilities = class_probabilities(sets.logits[row])
        return Described(
            class_index=index, class_name=name_of(names, index), probability=round(float(probabilities[index]), 6),
            score=round(float(sets.logits[row, index]), 6), topk=topk_entries(probabilities, names),
        )  # fmt: skip


class DetectUnits:
    """A detector: a unit per kept detection (⟨score_threshold⟩, ⟨max_detections⟩, ⟨classes⟩), scored by its own score
    as evaluate/detection_scoring.py reads it; its energy in its box and its pointing game need no truth."""

    unit = "detection"
    score = "detection score"
    own_measures = frozenset({"energy_in_box"})

    def __init__(self, run: PreparedRun) -> None:
        assert run.loaded.detector is not None
        self.family, self.model_name = run.loaded.detector, run.loaded.name
        self.input_hw = run.loaded.data_config.input_hw
        self.largest_detection: int | None = max(0, run.targets.count - 1)

    def check(self, settings: ExplainSettings) -> None:
        return None  # ⟨classes⟩ keeps the detections of those classes, as explain's

    def metrics(self, asked: Sequence[Metric], defaulted: bool, boxes: Path | None) -> tuple[Metric, ...]:
        return own_place_metrics(
            asked, defaulted, boxes, "⟨boxes⟩ does not apply to a detector: its energy in box and pointing game use each "
            "detection's own box (no truth needed); leave ⟨boxes⟩ out",
        )  # fmt: skip

    def units(self, first: CamBatch, batch: Sequence[Decoded]) -> Units:
        assert first.found is not None
        image, rank, classes, boxes = [], [], [], []
        for row in range(len(batch)):
            found = first.found[row]
            for k in first.ranks(row):
                image.append(row)
                rank.append(k)
                classes.append(int(found.labels[k]))
                boxes.append(found.boxes[k].detach().float().cpu())
        long = {"dtype": torch.long}
        return Units(
            image=torch.tensor(image, **long), rank=torch.tensor(rank, **long), classes=torch.tensor(classes, **long),  # type: ignore[arg-type]
            boxes=torch.stack(boxes) if boxes else torch.zeros((0, 4)),
        )  # fmt: skip

    def targets(self, units: Units, rows: int) -> Targets:
        """Each detection again: the candidate of its class that overlaps its box best, among every candidate the model
        scored (cams/detections.py's rule for a missed object): in the trained model its own candidate, at IoU 1; in a
        randomised copy, whatever that copy scores there."""
        assert units.boxes is not None
        lost = tuple(
            tuple(Lost(tuple(float(v) for v in units.boxes[u].tolist()), int(units.classes[u])) for u in units.of(row))  # type: ignore[arg-type]
            for row in range(rows)
        )
        return MissedTargets(self.family, lost, ((1.0, 1.0),) * rows, self.input_hw)

    def scorer(self, units: Units) -> Scorer:
        assert units.boxes is not None
        return DetectionScores(self.family, units.boxes, units.classes, self.input_hw, self.model_name)

    def measure(self, metrics: Sequence[Metric], batch: Sequence[Decoded], sets: BatchMaps, photo_map: PhotoMap) -> OwnMeasures:
        """Per map set and detection: the share of the map's energy in the detection's box, and whether its peak is in
        it, on the photo, as explain's records compute them (outputs/detection_files.in_box)."""
        wanted = [(metric, key) for metric, key in ((Metric.energy, "energy_in_box"), (Metric.pointing, "pointing")) if metric in metrics]
        if not wanted:
            return {}
        boxes = [self._photo_box(sets.units, u, batch[int(sets.units.image[u])].geometry) for u in range(len(sets.units))]
        out: OwnMeasures = {}
        for name, maps in sets.maps.items():
            figures = [in_box(photo_map(batch[int(sets.units.image[u])], maps[u]), boxes[u]) for u in range(len(sets.units))]
            peaks = [None if peak is None else float(peak) for _, peak in figures]
            values = {"energy_in_box": [energy for energy, _ in figures], "pointing": peaks}
            out[name] = {key: values[key] for _, key in wanted}
        return out

    def describe(self, sets: BatchMaps, unit: int, item: Decoded, names: Sequence[str] | None) -> Described:
        row, rank, index = int(sets.units.image[unit]), int(sets.units.rank[unit]), int(sets.units.classes[unit])
        score = round(float(sets.logits[row, rank]), 6)
        box = [round(v, 2) for v in self._photo_box(sets.units, unit, item.geometry)]
        drawn = DrawnBox((box[0], box[1], box[2], box[3]), label_of(names, index, score), rank)
        return Described(
            class_index=index, class_name=name_of(names, index), probability=score, score=score, topk=[], detection=rank, box=box,
            drawn=drawn,
        )  # fmt: skip

    @staticmethod
    def _photo_box(units: Units, unit: int, geometry: Geometry) -> list[float]:
        """A detection's box in the photo's pixels (its image's geometry)."""
        assert units.boxes is not None
        return boxes_to_original(units.boxes[unit : unit + 1], geometry)[0].tolist()


@dataclass(frozen=True)
class SimilarityScores:
    """A similarity's scorer (faithfulness.Scorer): each perturbed input scored by its unit's similarity to its prompt
    (or to the references) as the model scores it, the value the maps explain (no probability to read it through)."""

    classes: torch.Tensor  # (U,) each unit's prompt

    @property
    def count(self) -> int:
        return len(self.classes)

    def __call__(self, model: nn.Module, inputs: torch.Tensor, units: torch.Tensor) -> torch.Tensor:
        scores = model(inputs)
        return scores[torch.arange(len(units), device=scores.device), self.classes.to(scores.device)[units]]


class MatchUnits(ClassifyUnits):
    """A similarity (run/matching.py): a unit per image and prompt (every prompt is explained), or per image for an
    embedding model's references, scored by the similarity itself; the metrics a classifier's."""

    score = "similarity"

    def __init__(self, run: PreparedRun) -> None:
        self.prompts = run.kind is TargetKind.prompt
        self.unit = "image and prompt" if self.prompts else "image"

    def check(self, settings: ExplainSettings) -> None:
        return None  # the task refused ⟨classes⟩ already: every prompt is a unit

    def units(self, first: CamBatch, batch: Sequence[Decoded]) -> Units:
        count = int(first.targets.shape[1])
        image = torch.arange(len(batch)).repeat_interleave(count)
        rank = torch.arange(count).repeat(len(batch))
        return Units(image=image, rank=rank, classes=first.targets.cpu().long()[image, rank])

    def targets(self, units: Units, rows: int) -> Targets:
        return TargetChoice(classes=tuple(sorted(set(int(c) for c in units.classes.tolist()))))

    def scorer(self, units: Units) -> Scorer:
        return SimilarityScores(units.classes)

    def describe(self, sets: BatchMaps, unit: int, item: Decoded, names: Sequence[str] | None) -> Described:
        row, index = int(sets.units.image[unit]), int(sets.units.classes[unit])
        score = round(float(sets.logits[row, index]), 6)
        return Described(
            class_index=index, class_name=name_of(names, index), probability=None, score=score, topk=[], named_class=self.prompts
        )


def eval_units(run: PreparedRun) -> EvalUnits:
    """The evaluation's part of the run's task (run/tasks.py)."""
    if run.task.name in (Task.prompt, Task.reference):
        return MatchUnits(run)
    if run.task.name is Task.segment:
        from gradcam_cli.run.evaluation_segments import SegmentUnits  # a classifier's evaluation never loads it

        return SegmentUnits(run)
    return DetectUnits(run) if run.task.name is Task.detect else ClassifyUnits()
