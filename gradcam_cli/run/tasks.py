"""What a model does, and so what its maps explain: a task behind one seam, as a hub is behind ModelSource.

A task says, for a prepared run: its default layers, the targets read from
the model's output (cams/targets.py for classes, cams/detections.py for
detected objects), how several layers combine by default, what its records call
the target, and which options do not apply to it (one line each). The engine,
the batches, resume and the writing ask the task and never branch on it;
the pictures and records of each task are written by its own module in
outputs/ (outputs/writer.py, outputs/detection_files.py,
outputs/segment_files.py). A similarity to prompts or references
(run/matching.py) is a classifier's map of a view that scores it: only its
refusals and the kind of its scores are its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from gradcam_cli.cams.detections import DEFAULT_MAX_DETECTIONS, DEFAULT_SCORE_THRESHOLD, DetectionTargets
from gradcam_cli.cams.methods import CamMethod
from gradcam_cli.cams.segments import DEFAULT_MIN_AREA, SegmentTargets
from gradcam_cli.cams.targets import TargetChoice, Targets, parse_class, target_choice
from gradcam_cli.errors import UsageError
from gradcam_cli.layers.defaults import clip_layer_paths, default_layer_paths, segmenter_layer_paths, tower_layer_paths
from gradcam_cli.model.blocks import input_channels_3d
from gradcam_cli.model.load import LoadedModel
from gradcam_cli.model.segmenters import is_background
from gradcam_cli.settings import ExplainSettings
from gradcam_cli.vocab import Combine, Method, TargetKind, Task


class RunTask(Protocol):
    """One task's part in preparing a run."""

    name: Task
    combine: Combine  # how several layers' maps merge unless ⟨combine⟩ says
    method: Method  # the CAM method unless ⟨method⟩ says

    def check(self, settings: ExplainSettings, method: CamMethod) -> None:
        """Refuse, in one line, the options and methods that do not apply to this task."""

    def layers(self, loaded: LoadedModel) -> list[str]:
        """The default target layers."""

    def targets(self, settings: ExplainSettings, loaded: LoadedModel, outputs: int | None, warn: Callable[[str], None]) -> Targets:
        """What each batch's maps explain."""

    def kind(self, settings: ExplainSettings, targets: Targets, outputs: int | None) -> TargetKind:
        """What one map explains, as records say it, and so how its score reads as a probability."""


class ClassifyTask:
    """A classifier: one map per chosen class (top-1, named, top K, labels above a threshold, a regression value)."""

    name = Task.classify
    combine = Combine.mean
    method = Method.gradcam

    def check(self, settings: ExplainSettings, method: CamMethod) -> None:
        _refuse_others(settings, Task.classify)
        if settings.outputs.each:
            raise UsageError("⟨each⟩ applies to detectors and segmenters; this model is a classifier (it returns class scores)")

    def layers(self, loaded: LoadedModel) -> list[str]:
        return _scoring_layers(loaded)

    def targets(self, settings: ExplainSettings, loaded: LoadedModel, outputs: int | None, warn: Callable[[str], None]) -> Targets:
        """The classes, labels or output value each map explains, as the target options ask."""
        target = settings.target
        chosen = target_choice(
            target.classes, target.topk, loaded.class_names, multilabel=target.multilabel, threshold=target.threshold,
            output_index=target.output_index,
        )  # fmt: skip
        if outputs is not None:
            chosen.check(outputs)  # before any image is read, where the model says its width
        return _fit_topk(chosen, outputs, warn)

    def kind(self, settings: ExplainSettings, targets: Targets, outputs: int | None) -> TargetKind:
        """A class of a softmax, a single logit (binary), independent labels, or a regression's raw value."""
        if isinstance(targets, TargetChoice) and targets.regression:
            return TargetKind.regression
        if settings.target.multilabel:
            return TargetKind.multilabel
        return TargetKind.binary if outputs == 1 else TargetKind.single_class


def _fit_topk(targets: TargetChoice, classes: int | None, warn: Callable[[str], None]) -> TargetChoice:
    """--topk above the number of classes explains every class, and says so once."""
    if classes is None or targets.classes or targets.by_threshold or targets.topk <= classes:
        return targets
    warn(f"⟨topk={targets.topk}⟩: the model has only {classes} classes; explaining all {classes}")
    return TargetChoice(topk=classes)


class DetectTask:
    """A detector: one map per kept detection, the gradient of that detection's own class score."""

    name = Task.detect
    combine = Combine.sum
    # gradcam pools each channel's gradient over the whole map, so one object's map lights every object alike (on the
    # example detector its peak fell in its own box for 39% of detections); hirescam keeps the gradient where it is (100%)
    method = Method.hirescam

    def check(self, settings: ExplainSettings, method: CamMethod) -> None:
        _refuse_others(settings, Task.detect)
        maps = settings.maps
        _refuse([
            *_not_a_classifier(
                settings, "a detector's maps are its detections (see ⟨max_detections⟩)",
                "a detector keeps detections by ⟨score_threshold⟩", "a detector returns boxes",
            ),
            (maps.aug_smooth, "⟨aug_smooth⟩ does not apply to detectors: its mirrored and zoomed views move the boxes"),
            (settings.inputs.crop, "⟨crop⟩ does not apply to detectors: the whole photo is letterboxed into the input"),
            (settings.outputs.save_raw or settings.outputs.save_guided, "⟨save_raw⟩ and ⟨save_guided⟩ do not apply to "
             "detectors yet; the Python API's explain() returns each detection's map as an array"),
        ])  # fmt: skip

    def layers(self, loaded: LoadedModel) -> list[str]:
        assert loaded.detector is not None
        return loaded.detector.default_layers(loaded.model)

    def targets(self, settings: ExplainSettings, loaded: LoadedModel, outputs: int | None, warn: Callable[[str], None]) -> Targets:
        assert loaded.detector is not None
        target = settings.target
        classes = tuple(parse_class(value, loaded.class_names) for value in target.classes)
        bad = [c for c in classes if outputs is not None and not 0 <= c < outputs]
        if bad and outputs is not None:
            raise UsageError(f"class index {bad[0]} is out of range; the detector has {outputs} classes (0..{outputs - 1})")
        return DetectionTargets(
            loaded.detector,
            score_threshold=DEFAULT_SCORE_THRESHOLD if target.score_threshold is None else target.score_threshold,
            max_detections=target.max_detections or DEFAULT_MAX_DETECTIONS,
            classes=classes,
            input_hw=loaded.data_config.input_hw,
        )

    def kind(self, settings: ExplainSettings, targets: Targets, outputs: int | None) -> TargetKind:
        return TargetKind.detection


class SegmentTask:
    """A segmenter: one map per region, the gradient of a class's score summed over it (cams/segments.py)."""

    name = Task.segment
    combine = Combine.mean
    # gradcam pools each channel's gradient over the whole map, so a region's map lights every place its channels fire
    # (another object of the class, one the region leaves out); hirescam keeps the gradient where the region reads it
    method = Method.hirescam

    def check(self, settings: ExplainSettings, method: CamMethod) -> None:
        _refuse_others(settings, Task.segment)
        target, maps = settings.target, settings.maps
        _refuse([
            *_not_a_classifier(
                settings, "a segmenter explains every class it finds (see ⟨min_area⟩) or the ⟨classes⟩ named",
                "a segmenter explains each class's region", "a segmenter returns a map per class",
            ),
            (maps.aug_smooth, "⟨aug_smooth⟩ does not apply to segmenters: its mirrored and zoomed views move the regions"),
            (settings.inputs.crop, "⟨crop⟩ does not apply to segmenters: every pixel of the photo is segmented"),
            (settings.outputs.save_raw or settings.outputs.save_guided, "⟨save_raw⟩ and ⟨save_guided⟩ do not apply to "
             "segmenters yet; the Python API's explain() returns each region's map as an array"),
            (target.region == "truth" and settings.inputs.truth is None, "⟨region=truth⟩ sums each class's score over its "
             "true mask: give the masks with ⟨truth⟩"),
            (isinstance(target.region, tuple) and target.mask is not None, "⟨region⟩ and ⟨mask⟩ both name the region; give one"),
        ])  # fmt: skip

    def layers(self, loaded: LoadedModel) -> list[str]:
        assert loaded.segmenter is not None
        config = loaded.data_config  # a 3-D segmenter's probe at (C, D, H, W), over the channels its first Conv3d reads
        channels = input_channels_3d(loaded.model) if config.clip_length is not None else 3
        return segmenter_layer_paths(loaded.model, config.input_size, loaded.segmenter.classes, channels)

    def targets(self, settings: ExplainSettings, loaded: LoadedModel, outputs: int | None, warn: Callable[[str], None]) -> Targets:
        assert loaded.segmenter is not None
        target, names = settings.target, loaded.class_names
        classes = tuple(parse_class(value, names) for value in target.classes)
        count = loaded.segmenter.classes
        bad = [c for c in classes if not 0 <= c < count]
        if bad:
            raise UsageError(f"class index {bad[0]} is out of range; the segmenter has {count} classes (0..{count - 1})")
        unasked = tuple(i for i, name in enumerate(names or []) if is_background(name) and count > 1)
        return SegmentTargets(
            loaded.segmenter, loaded.data_config.input_size, classes=classes,
            min_area=DEFAULT_MIN_AREA if target.min_area is None else target.min_area, unasked=unasked,
            over_truth=target.region == "truth", with_truth=settings.inputs.truth is not None,
        )  # fmt: skip

    def kind(self, settings: ExplainSettings, targets: Targets, outputs: int | None) -> TargetKind:
        return TargetKind.segment


class MatchTask:
    """A similarity (run/matching.py): one map per prompt of a CLIP-style model, or one for an embedding model's
    references, the gradient of the image's score against it."""

    combine = Combine.mean
    method = Method.gradcam  # the CLIP examples' method; a similarity pools the whole image, as a class score does

    def __init__(self, name: Task, kind: TargetKind, doing: str) -> None:
        self.name, self._kind, self._doing = name, kind, doing

    def check(self, settings: ExplainSettings, method: CamMethod) -> None:
        _refuse_others(settings, self.name)
        every = f"{self._doing}; leave ⟨classes⟩ out" if self.name is Task.prompt else self._doing
        _refuse([
            *_not_a_classifier(settings, every, every, self._doing),
            (bool(settings.target.classes), f"⟨classes⟩ picks a classifier's class; {every}"),
            (settings.inputs.truth is not None, f"⟨truth⟩ names each image's class; {self._doing}, which has none to be true"),
            (settings.outputs.each, "⟨each⟩ applies to detectors and segmenters; the maps of a similarity are one per image"),
        ])  # fmt: skip

    def layers(self, loaded: LoadedModel) -> list[str]:
        return _scoring_layers(loaded)

    def targets(self, settings: ExplainSettings, loaded: LoadedModel, outputs: int | None, warn: Callable[[str], None]) -> Targets:
        """Every prompt (or the references' one similarity), in the order given."""
        return TargetChoice(classes=tuple(range(outputs or 1)))

    def kind(self, settings: ExplainSettings, targets: Targets, outputs: int | None) -> TargetKind:
        return self._kind


def _scoring_layers(loaded: LoadedModel) -> list[str]:
    """A classifier's (or a similarity's) default layers: a CLIP-style model's in its image tower, else the model's."""
    input_hw = loaded.data_config.input_hw
    if loaded.data_config.clip_length is not None:  # a model that takes clips or volumes: probed at (C, T, H, W)
        return clip_layer_paths(loaded.model, (input_channels_3d(loaded.model), *loaded.data_config.input_size))
    if loaded.towers is not None:
        return tower_layer_paths(loaded.model, loaded.towers.image_tower(loaded.model), input_hw)
    return default_layer_paths(loaded.model, loaded.arch, loaded.source, input_hw=input_hw)


OWN_OPTIONS = {  # the options only one task takes, and what does that task
    Task.detect: (("score_threshold", "max_detections"), "detectors"),
    Task.segment: (("min_area", "region", "mask"), "segmenters"),
}


def _not_a_classifier(settings: ExplainSettings, topk: str, threshold: str, output_index: str) -> list[tuple[bool, str]]:
    """A classifier's target options, refused by another task: each message's second half says what that task does."""
    target = settings.target
    return [
        (target.topk > 1, f"⟨topk⟩ picks classes of a classifier; {topk}"),
        (target.multilabel or target.threshold is not None, f"⟨multilabel⟩ and ⟨threshold⟩ are a classifier's; {threshold}"),
        (target.output_index is not None, f"⟨output_index⟩ explains a regression output; {output_index}"),
    ]


def _refuse(refused: list[tuple[bool, str]]) -> None:
    """The first option given that does not apply, in one line."""
    for wrong, message in refused:
        if wrong:
            raise UsageError(message)


def _refuse_others(settings: ExplainSettings, task: Task) -> None:
    """Another task's options, refused in one line: what they apply to, and what this model is."""
    target = settings.target
    for other, (names, doers) in OWN_OPTIONS.items():
        given = [name for name in names if other is not task and getattr(target, name) is not None]
        if given:
            raise UsageError(f"⟨{given[0]}⟩ applies to {doers}; this model is {WHAT_IT_DOES[task]}")


TASKS: dict[Task, RunTask] = {
    Task.classify: ClassifyTask(),
    Task.detect: DetectTask(),
    Task.segment: SegmentTask(),
    Task.prompt: MatchTask(Task.prompt, TargetKind.prompt, "every prompt is explained, one map each"),
    Task.reference: MatchTask(Task.reference, TargetKind.reference, "the map explains the similarity to the references"),
}

WHAT_IT_DOES = {
    Task.classify: "a classifier (it returns class scores, not boxes)",
    Task.detect: "a detector (it returns boxes)",
    Task.segment: "a segmenter (it returns a score map per class)",
    Task.prompt: "a CLIP-style model scoring images against ⟨prompts⟩",
    Task.reference: "an embedding model scoring images against ⟨references⟩",
}


def task_for(settings: ExplainSettings, loaded: LoadedModel) -> RunTask:
    """The model's own task; ⟨task⟩ only confirms it (a model cannot do what its output does not say)."""
    found = Task(loaded.found_task)
    asked = settings.target.task
    if asked is not None and asked is not found:
        raise UsageError(f"⟨task={asked.value}⟩: {loaded.name} is {WHAT_IT_DOES[found]}; leave ⟨task⟩ out or name a model that does it")
    return TASKS[found]
