"""Model names → a ready model, its own preprocessing config and class names.

The hubs (model/hub.py) know how to build models, fetch weights and describe
their preprocessing; this module only asks the hub a name belongs to, loads
a user's checkpoint in its place and turns the failures into one-line
messages.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gradcam_cli.errors import GradcamError, UsageError
from gradcam_cli.model.consent import trusting_pickles
from gradcam_cli.model.checkpoint import checkpoint_num_classes, classifier_name, fit_prefix, load_checkpoint, read_state_dict
from gradcam_cli.model.detectors import DetectorFamily, checkpoint_classes, detector_family
from gradcam_cli.model.downloads import build_error, hub_offline, library_noise_off, plan_download
from gradcam_cli.model.hub import ModelSource, source_for
from gradcam_cli.model.labels import read_labels
from gradcam_cli.model.outputs import probed_output, scores_view
from gradcam_cli.model.segmenters import Segmenter, segmenter_of
from gradcam_cli.model.towers import Matched, TextImageFamily, text_image_family
from gradcam_cli.model.unfilled import built_unfilled
from gradcam_cli.timings import stamp

import torch
from torch import nn

if TYPE_CHECKING:
    from gradcam_cli.model.data_config import DataConfig


@dataclass
class LoadedModel:
    """A model in eval mode with everything needed to explain it."""

    model: nn.Module
    name: str
    source: ModelSource  # the hub that built it; source.name is "timm" or "torchvision"
    arch: str
    data_config: DataConfig
    class_names: list[str] | None
    num_prefix_tokens: int | None
    notices: list[str]  # what the run says once it starts (a guessed data config)
    output: str | None  # where in the forward's result the class scores are (None: the result is them)
    detector: DetectorFamily | None = None  # a detector's family (model/detectors.py): how its boxes are read
    segmenter: Segmenter | None = None  # a segmenter (model/segmenters.py): its output is a score map per class
    towers: TextImageFamily | None = None  # a CLIP-style model's family (model/towers.py): it scores images against texts
    matched: Matched | None = None  # the model is a view scoring images against prompts or references (run/matching.py)

    @property
    def num_classes(self) -> int | None:
        return len(self.class_names) if self.class_names else None

    @property
    def head_outputs(self) -> int | None:
        """The classes the model can be asked about: a classifier's outputs, a detector's head's, a segmenter's channels."""
        if self.matched is not None:
            return len(self.matched.names)
        return self.segmenter.classes if self.segmenter is not None else head_classes(self.model, self.detector)

    @property
    def found_task(self) -> str:
        """What the model does, as its output says: "detect" (boxes), "segment" (a score map per class), "prompt" or
        "reference" (a view scoring images against texts or images), or "classify"."""
        if self.detector is not None:
            return "detect"
        if self.matched is not None:
            return self.matched.task
        return "segment" if self.segmenter is not None else "classify"


def num_outputs(model: nn.Module) -> int | None:
    """The logits' width: the model's num_classes, else the classifier's weight."""
    num = getattr(model, "num_classes", None)
    if isinstance(num, int) and num > 0:
        return num
    name = classifier_name(model)
    if name is None:
        return None
    weight = getattr(dict(model.named_modules())[name], "weight", None)
    return int(weight.shape[0]) if weight is not None else None


def head_classes(model: nn.Module, family: DetectorFamily | None) -> int | None:
    """The classes the head scores: a classifier's outputs, a detector's head's classes."""
    return num_outputs(model) if family is None else family.num_classes(model)


def num_prefix_tokens(model: nn.Module, source: ModelSource, arch: str) -> int | None:
    """Class/distillation/register tokens before the patch tokens, where the model or its hub tells."""
    prefix = getattr(model, "num_prefix_tokens", None)
    return prefix if prefix is not None else source.num_prefix_tokens(model, arch)


def _seed_random_init() -> None:
    """Random weights are the same on every run, so --no-pretrained results reproduce."""
    torch.manual_seed(0)


def build_model(
    name: str,
    pretrained: bool = True,
    num_classes: int | None = None,
    kwargs: Mapping[str, Any] | None = None,
    *,
    weights_follow: bool = False,
    trust_pickle: bool = False,
) -> tuple[nn.Module, ModelSource, str]:
    """The bare module, the hub that built it and the architecture name; kwargs go to the hub's builder.

    `weights_follow`: the caller loads every parameter next (strictly), so none need filling (model/unfilled.py).
    `trust_pickle`: the user trusts a pickled model file the name gives (an Ultralytics .pt), whose loading runs code.
    """
    label = name.strip()
    source, arch = source_for(label)
    if not arch:
        raise UsageError("⟨model⟩ is empty; name a timm model, 'hf-hub:ORG/NAME' or 'torchvision:ARCH'")
    downloads = source.downloads(arch, pretrained)
    if not pretrained:
        _seed_random_init()
    unreachable = plan_download(label, source.weights_location(arch)) if downloads else None
    # torch.hub announces a download on stdout ('Downloading: "..." to ...'),
    # which would corrupt the JSON Lines there; stdout is for results only.
    quiet = library_noise_off() if downloads else contextlib.nullcontext()
    with contextlib.redirect_stdout(sys.stderr), quiet, hub_offline(unreachable is not None), trusting_pickles(trust_pickle):
        try:
            return _built(source, arch, pretrained, num_classes, kwargs, weights_follow), source, arch
        except GradcamError:
            raise
        except Exception as error:  # noqa: BLE001 - the libraries fail in many ways; the user gets one line
            raise build_error(label, downloads, error, unreachable) from error  # the cause stays for --debug


def _built(
    source: ModelSource, arch: str, pretrained: bool, num_classes: int | None, kwargs: Mapping[str, Any] | None, weights_follow: bool
) -> nn.Module:
    """The hub's build, its parameters left unfilled where weights reach every one of them (pretrained or following)."""

    def build() -> nn.Module:
        return source.build(arch, pretrained, num_classes, kwargs)

    if source.builds_unfilled and (pretrained or weights_follow):
        model = built_unfilled(build, loads_weights=pretrained)
        if model is not None:
            return model
    return build()


def load_model(
    name: str,
    *,
    pretrained: bool = True,
    weights: Path | None = None,
    labels: Path | None = None,
    kwargs: Mapping[str, Any] | None = None,
    preprocessing: Mapping[str, Any] | None = None,
    ema: bool = False,
    output: str | None = None,
    trust_pickle: bool = False,
) -> LoadedModel:
    """Build, load weights, and attach the model's own data config and class names.

    `kwargs` go to the builder (⟨model_kwargs⟩); `preprocessing` (input_hw, mean, std, interpolation, crop_pct)
    overrides the data config the model comes with, where the user knows better or the model has none; `ema`: the
    checkpoint's EMA weights; `output`: the key, attribute or index of the forward's result that holds the class
    scores (model/outputs.py has the rule without it); `trust_pickle`: the model file the name gives may be unpickled
    (it runs the code inside it).
    """
    label_names = read_labels(labels) if labels is not None else None
    notices: list[str] = []
    state = read_state_dict(weights, ema=ema, notice=notices.append) if weights is not None else None
    trust, follows = {"trust_pickle": trust_pickle}, state is not None
    model, source, arch = build_model(name, pretrained=pretrained and not follows, kwargs=kwargs, weights_follow=follows, **trust)
    stamp("build")
    family = detector_family(model)
    if state is not None:
        assert weights is not None
        state, fitted = fit_prefix(model, state, weights)
        notices += [fitted] if fitted else []
        wanted = checkpoint_num_classes(model, state, weights) if family is None else checkpoint_classes(family, model, state)
        if wanted is not None and wanted != head_classes(model, family):
            model, source, arch = build_model(name, pretrained=False, num_classes=wanted, kwargs=kwargs, weights_follow=True, **trust)
        load_checkpoint(model, state, weights)
        stamp("weights")
    model.eval()
    config = replace(family.data_config(model) if family else source.data_config(model, arch), **dict(preprocessing or {}))
    if family is not None:  # boxes, not class scores: the detection task reads them (no view, no probe of scores)
        names = _class_names(source, model, arch, head_classes(model, family), label_names, labels)
        return LoadedModel(model, name.strip(), source, arch, config, names, None, notices, None, family)
    towers = text_image_family(model)
    if towers is not None:  # no class scores until prompts or references are given (run/matching.py); ⟨labels⟩ are its classes
        prefix = towers.num_prefix_tokens(model)
        return LoadedModel(model, name.strip(), source, arch, config, label_names, prefix, notices, None, towers=towers)
    model = scores_view(model, output)
    found, shape = probed_output(model, config.input_size)
    segmenter = segmenter_of(shape)  # scores (N, C, H, W): a segmenter, its classes its output's channels
    outputs = segmenter.classes if segmenter is not None else head_classes(model, None)
    names = _class_names(source, model, arch, outputs, label_names, labels)
    guessed = source.data_config_notice(arch, frozenset(preprocessing or {}))
    notices += [guessed] if guessed else []
    prefix = num_prefix_tokens(model, source, arch)
    return LoadedModel(model, name.strip(), source, arch, config, names, prefix, notices, found, segmenter=segmenter)


def _class_names(
    source: ModelSource, model: nn.Module, arch: str, outputs: int | None, label_names: list[str] | None, labels: Path | None
) -> list[str] | None:
    """The ⟨labels⟩ file's names (as many as the model has classes), else the hub's."""
    if label_names is not None and outputs is not None and len(label_names) != outputs:
        raise UsageError(f"⟨labels={labels}⟩ names {len(label_names)} classes but the model has {outputs} outputs")
    return label_names or (source.class_names(model, arch, outputs) if outputs else None)
