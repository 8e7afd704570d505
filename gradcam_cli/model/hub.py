"""Model hubs: what a library that provides models must tell, and the registry of them.

A hub turns a model name into a network and knows that network's facts: its
preprocessing, class names, where its weights come from, its default target
layer and its stages. The loader and the layer defaults ask the hub and never branch on
which one it is; a new hub is one module with a ModelSource plus one line in
SOURCES.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from gradcam_cli.model.code_hub import CODE
from gradcam_cli.model.hf_hub import HUGGING_FACE
from gradcam_cli.model.open_clip_hub import OPEN_CLIP
from gradcam_cli.model.smp_hub import SMP
from gradcam_cli.model.timm_hub import TIMM
from gradcam_cli.model.torchvision_hub import TORCHVISION
from gradcam_cli.model.ultralytics_hub import ULTRALYTICS

from torch import nn

if TYPE_CHECKING:
    from gradcam_cli.model.data_config import DataConfig


class ModelSource(Protocol):
    """A library that builds models by name (timm, torchvision, ...).

    Methods import their own library (timm, torchvision) when called, so a run
    pays only for the hub its model comes from.
    """

    name: str  # short and stable: "timm", "torchvision"
    builds_unfilled: bool  # its models may be built with their parameters unfilled when weights follow (model/unfilled.py)

    def arch_of(self, name: str) -> str | None:
        """The architecture this hub reads in a model name as the user gave it, or None: not this hub's."""

    def downloads(self, arch: str, pretrained: bool) -> bool:
        """Whether building reaches for the network, so the download is planned and the libraries kept quiet."""

    def build(self, arch: str, pretrained: bool, num_classes: int | None, kwargs: Mapping[str, Any] | None = None) -> nn.Module:
        """The network; num_classes None keeps the hub's own head; kwargs go to the builder (⟨model_kwargs⟩). UsageError
        for an unknown arch."""

    def weights_location(self, arch: str) -> tuple[str, str] | None:
        """('hf', Hugging Face endpoint) or ('url', download URL) of the pretrained weights; None: no request."""

    def data_config(self, model: nn.Module, arch: str) -> DataConfig:
        """The preprocessing the model's weights expect: input size, mean, std, interpolation, crop."""

    def data_config_notice(self, arch: str, given: frozenset[str]) -> str | None:
        """What to say when data_config is a guess (the user's own model has none) beyond the parts `given` by the
        user (DataConfig's field names), else None."""

    def class_names(self, model: nn.Module, arch: str, num_classes: int) -> list[str] | None:
        """Class names from the hub's metadata (ImageNet heads), when the head fits them; else None."""

    def default_layer(self, model: nn.Module, arch: str) -> str | None:
        """The dotted path of the default target layer for models of this hub's look, or None: no opinion."""

    def stage_layers(self, model: nn.Module, arch: str) -> list[str] | None:
        """Dotted paths of one layer per stage, in forward order (`gradcam compare --layers stages`), or None: no opinion."""

    def num_prefix_tokens(self, model: nn.Module, arch: str) -> int | None:
        """Prefix tokens (class, distillation, register) the family prepends when the module does not say."""


# Asked in order: `torchvision:`, `hf:`, `yolo:`, `smp:` and `open_clip:` before the user's `module:name` (which they would also spell);
# timm is last because it reads every name (its own, hf-hub:).
SOURCES: tuple[ModelSource, ...] = (TORCHVISION, HUGGING_FACE, ULTRALYTICS, SMP, OPEN_CLIP, CODE, TIMM)


def source_for(name: str) -> tuple[ModelSource, str]:
    """The first hub that recognises the model name, and the architecture it reads in it."""
    return next((source, arch) for source in SOURCES if (arch := source.arch_of(name)) is not None)
