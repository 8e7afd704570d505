"""Building a run: the model once, its layers, the method, the classes, the device; and one batch's maps.

Everything here happens before the first image is read, so a bad option,
layer or model stops the run before any file is written. `benchmarks/speed.py`
prepares its runs with `prepare_run` too: what it times is what the CLI runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from gradcam_cli.version import __version__
from gradcam_cli.cams.engine import compute_cams
from gradcam_cli.cams.methods import CamMethod, MethodKind, get_method
from gradcam_cli.cams.targets import TargetChoice, Targets
from gradcam_cli.cams.augment import VIEWS
from gradcam_cli.errors import GradcamError, ModelError, UsageError
from gradcam_cli.extract.perturb import measure_cost
from gradcam_cli.layers.paths import ResolvedLayer, resolve_layers
from gradcam_cli.maps import CamBatch, CamOptions, ProgressFn
from gradcam_cli.model import load as model_load
from gradcam_cli.model.device import place_model, resolve_device, resolve_precision
from gradcam_cli.model.faults import fault_line, raised_by_model
from gradcam_cli.run.matching import matched
from gradcam_cli.run.tasks import RunTask, task_for
from gradcam_cli.settings import ExplainSettings
from gradcam_cli.vocab import TargetKind

NO_PRETRAINED = (
    "⟨pretrained=False⟩: random (seeded) weights; the classes and maps mean nothing (useful only to try the tool or a layer path)"
)


@dataclass(kw_only=True)
class PreparedRun:
    """What every batch of a run shares: the placed model, its layers, the method, the classes, the options."""

    settings: ExplainSettings
    loaded: model_load.LoadedModel
    method: CamMethod
    layers: list[ResolvedLayer]
    task: RunTask  # classify or detect (run/tasks.py)
    targets: Targets  # a TargetChoice for a classifier, DetectionTargets for a detector
    device: torch.device
    options: CamOptions
    channels_last: bool
    num_outputs: int | None  # the logits' width (the classes the model can be asked about)
    notices: list[str] = field(default_factory=list)  # said once when the run starts, after every check has passed

    @property
    def model(self) -> nn.Module:
        return self.loaded.model

    def compute(self, x: torch.Tensor, targets: Targets | None = None) -> CamBatch:
        """The maps of a preprocessed batch (N, 3, H, W) or of clips (N, 3, T, H, W), computed as the run does (device,
        memory format); `targets` for this batch only (a detector's missed objects), else the run's."""
        x = x.to(self.device, non_blocking=True)
        if self.channels_last and x.dim() == 4:  # a clip's (N, C, T, H, W) keeps its layout: channels_last is 4-D
            x = x.contiguous(memory_format=torch.channels_last)
        cams = compute_cams(
            self.model,
            x,
            self.layers,
            self.method,
            targets or self.targets,
            options=self.options,
            num_prefix_tokens=self.loaded.num_prefix_tokens,
            grid=self.settings.target.grid,
            model_name=self.loaded.name,
        )
        return cams

    @property
    def classes(self) -> TargetChoice | None:
        """A classifier's class choice; None for another task."""
        return self.targets if isinstance(self.targets, TargetChoice) else None

    @property
    def kind(self) -> TargetKind:
        """What a map explains: a class of a softmax, a single logit (binary), independent labels, a raw value, an object."""
        return self.task.kind(self.settings, self.targets, self.num_outputs)

    def target_kind(self) -> str:
        """The records' `target`: the kind, and whether the maps explain minus the score."""
        return f"{self.kind.value}, negative" if self.options.negative else self.kind.value

    def layer_names(self) -> list[str]:
        """The layers the maps come from, as the records report them."""
        if self.method.network_layers is not None:
            count = len(self.method.network_layers(self.model))
            return [f"input + {count} bias layers (whole network)"]
        return [layer.name for layer in self.layers]

    def queries(self) -> dict[str, list[str] | None]:
        """What a similarity is to, as records say it: the prompts a CLIP-style model scores (a zero-shot label's through
        its template), the reference images; None where the run has none."""
        matched = self.loaded.matched
        return {
            "prompts": list(matched.prompts) if matched and matched.prompts else None,
            "references": list(matched.references) if matched and matched.references else None,
        }

    def picture_settings(self) -> dict[str, Any]:
        """How the pictures are drawn (a report's colour legend reads the colour map from the records)."""
        outputs = self.settings.outputs
        inputs = self.settings.inputs
        video = {  # a video's frames and maps over K frames: said when asked (an image's records stay as they were)
            **({"every": inputs.every} if inputs.every > 1 else {}),
            **({"fps": inputs.fps} if inputs.fps is not None else {}),
            **({"smooth": outputs.smooth} if outputs.smooth > 1 else {}),
        }
        return {
            "style": outputs.style.value, "colormap": outputs.colormap.value, "alpha": outputs.alpha, "caption": outputs.caption,
            **video,
        }  # fmt: skip

    def record_context(self) -> dict[str, Any]:
        """What every record of this run repeats, so a run can be reproduced from any line of its output."""
        settings, maps = self.settings, self.settings.maps
        return {
            "model": self.loaded.name,
            "source": self.loaded.source.name,
            "output": self.loaded.output,
            "target": self.target_kind(),
            "layers": self.layer_names(),
            "method": self.method.name,
            **self.queries(),
            "device": str(self.device),
            "settings": {
                "preprocess": "crop" if settings.inputs.crop else "whole",
                "relu": maps.relu,
                "norm": str(maps.norm.value),
                "combine": str(self.options.combine.value),
                "eigen_smooth": maps.eigen_smooth,
                "aug_smooth": maps.aug_smooth,
                **self.picture_settings(),
                "precision": str(self.options.precision or "fp32").replace("torch.", ""),
                "pretrained": settings.model.pretrained_said(),
                "weights": str(settings.model.weights) if settings.model.weights else None,
                "version": __version__,
            },
        }


def prepare_run(
    settings: ExplainSettings,
    *,
    warn: Callable[[str], None] = lambda _m: None,
    progress: ProgressFn | None = None,
    checkpoint: Callable[[], None] = lambda: None,
    loaded: model_load.LoadedModel | None = None,
    device: torch.device | None = None,
    notices: bool = True,
) -> PreparedRun:
    """Check the method's options, build and place the model, resolve its layers and the classes to explain.

    The Python API passes a model it loaded already (`loaded`, on `device`) and asks for no notices
    (`notices=False`: no measured cost of the masked forwards before each image).
    """
    if settings.target.method is not None:  # a method's options are checked before the model loads
        _check_method_options(settings, get_method(settings.target.method), lambda _m: None)
    device = device or resolve_device(settings.run.device, settings.run.local_rank)
    loaded = matched(loaded or _load(settings), settings, device)  # scoring prompts or references, where asked
    task = task_for(settings, loaded)
    method = get_method(settings.target.method or task.method)
    _check_method_options(settings, method, warn)
    task.check(settings, method)
    maps = settings.maps
    options = CamOptions(
        relu=maps.relu,
        norm=maps.norm,
        combine=maps.combine or task.combine,
        eigen_smooth=maps.eigen_smooth,
        aug_smooth=maps.aug_smooth,
        cam_batch_size=maps.cam_batch_size,
        precision=resolve_precision(settings.run.precision, device),
        negative=settings.target.negative,
        progress=_checked_progress(progress, checkpoint),
    )
    layers = resolve_layers(loaded.model, list(settings.target.layers) or task.layers(loaded), loaded.name)
    said: list[str] = list(loaded.notices)
    outputs = loaded.head_outputs
    targets = task.targets(settings, loaded, outputs, said.append)
    model = settings.model
    if model.pretrained_said() is False and model.weights is None:  # your code's weights are your code's to say
        said.append(NO_PRETRAINED)
    prepared = PreparedRun(
        settings=settings,
        loaded=loaded,
        method=method,
        layers=layers,
        task=task,
        targets=targets,
        device=device,
        options=options,
        channels_last=place_model(loaded.model, device),
        num_outputs=outputs,
        notices=said if notices else [],
    )
    if notices and method.kind == MethodKind.PERTURBATION:
        said.append(_perturbation_cost(prepared))
    return prepared


def _load(settings: ExplainSettings) -> model_load.LoadedModel:
    """The model the settings name, built and loaded."""
    model = settings.model
    return model_load.load_model(
        model.name, pretrained=model.pretrained, weights=model.weights, labels=model.labels, kwargs=dict(model.kwargs),
        preprocessing=model.preprocessing(), ema=model.ema, output=model.output, trust_pickle=model.trust_pickle,
    )  # fmt: skip


def _perturbation_cost(run: PreparedRun) -> str:
    """scorecam and ablationcam run one forward per channel of the layer, for each class and each augmented
    view: say what that costs, before it does."""
    chunk = min(run.settings.maps.cam_batch_size, 8)
    x = torch.zeros(chunk, 3, *run.loaded.data_config.input_hw, device=run.device)
    if run.channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    try:
        cost = measure_cost(run.model, run.layers, x)
    except (Exception, SystemExit) as error:  # noqa: BLE001 - only the model's own failure is one line here
        if isinstance(error, GradcamError) or not raised_by_model(error):
            raise
        raise ModelError(
            f"⟨model⟩: its forward failed on {chunk} blank images at once, as {run.method.name}'s masked forwards "
            f"run them: {fault_line(error)}",
            hint="fix the model's forward, or run the masked forwards one at a time with ⟨cam_batch_size=1⟩",
        ) from None
    layers = ", ".join(f"{name}: {count:,} channels" for name, count in cost.channels.items())
    times = run.targets.count * (len(VIEWS) if run.options.aug_smooth else 1)  # the forwards run again per class and view
    also = "".join(
        [
            f" x {'up to ' if run.kind is TargetKind.detection else ''}{run.targets.count} "
            f"{'detections' if run.kind is TargetKind.detection else 'classes'}"
            if run.targets.count > 1
            else "",
            f" x {len(VIEWS)} views of ⟨aug_smooth⟩" if run.options.aug_smooth else "",
        ]
    )
    return (
        f"{run.method.name} runs {cost.forwards_per_image * times:,} masked forwards per image ({layers}{also}), about "
        f"{_duration(cost.seconds_per_image * times)} per image on {run.device}; cheaper: ⟨method=gradcam⟩ "
        "(one backward), a ⟨layers⟩ with fewer channels, or a GPU"
    )


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


def _check_method_options(settings: ExplainSettings, method: CamMethod, warn: Callable[[str], None]) -> None:
    """Options that only some methods use: refuse the impossible, say what is ignored."""
    if settings.outputs.save_guided and not method.guided:
        raise UsageError("⟨save_guided⟩ writes the guided backpropagation image; it needs ⟨method=guided-gradcam⟩")
    if method.network_layers is not None and settings.target.layers:
        warn(f"{method.name} uses the input and every conv/batch-norm bias of the network; ⟨layers⟩ is ignored")
