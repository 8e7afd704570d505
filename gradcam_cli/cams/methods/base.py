"""The registry and the kinds of CAM method: what every method module builds on.

A leaf for the method modules (they import this, never the package), so the
package can import them all to fill the registry without an import cycle.
The command line checks method names against `vocab.Method`, never by importing this.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from gradcam_cli.errors import UsageError
from gradcam_cli.vocab import METHOD_NOTES, Method, closest

import torch

if TYPE_CHECKING:
    from gradcam_cli.extract.perturb import LayerProbe
    from gradcam_cli.maps import NetworkGradients


class MethodKind(str, Enum):
    """What a method needs from the model; `cams/engine.py` has one runner per kind, and each kind
    one signature (the Protocols below) that `register_method` checks."""

    GRADIENT = "gradient"
    ACTIVATION = "activation"
    PERTURBATION = "perturbation"
    NETWORK = "network"


class GradientCam(Protocol):
    """GRADIENT: activations and the score's gradients, both N×C×H×W → channel contributions N×C×H×W."""

    def __call__(self, activations: torch.Tensor, gradients: torch.Tensor, /) -> torch.Tensor: ...


class ActivationCam(Protocol):
    """ACTIVATION: activations N×C×H×W (no gradients: None) → channel contributions N×C×H×W."""

    def __call__(self, activations: torch.Tensor, gradients: None, /) -> torch.Tensor: ...


class PerturbationCam(Protocol):
    """PERTURBATION: a probe that runs masked forwards → channel weights N×C."""

    def __call__(self, probe: LayerProbe, /) -> torch.Tensor: ...


class NetworkCam(Protocol):
    """NETWORK: the gradients at the input and at every hooked layer → a raw map N×H×W."""

    def __call__(self, network: NetworkGradients, /) -> torch.Tensor: ...


def spatial_dims(t: torch.Tensor) -> tuple[int, ...]:
    """Every dim after the channels: (2, 3) of an image's N×C×H×W, (2, 3, 4) of a clip's or a volume's N×C×T×H×W."""
    return tuple(range(2, t.dim()))


CamFunction = GradientCam | ActivationCam | PerturbationCam | NetworkCam
ARITY = {MethodKind.GRADIENT: 2, MethodKind.ACTIVATION: 2, MethodKind.PERTURBATION: 1, MethodKind.NETWORK: 1}


@dataclass(frozen=True, kw_only=True)
class CamMethod:
    name: str
    summary: str
    passes: str
    compute: CamFunction
    kind: MethodKind = MethodKind.GRADIENT
    projection: bool = False  # channels reduced by the first principal component, not a sum
    guided: bool = False  # the map is multiplied by guided backpropagation at the input
    network_layers: Callable[[Any], list[Any]] | None = None  # NETWORK kind: model → the ResolvedLayers to hook

    def gradient_cam(self) -> GradientCam:
        return cast(GradientCam, self._of(MethodKind.GRADIENT))

    def activation_cam(self) -> ActivationCam:
        return cast(ActivationCam, self._of(MethodKind.ACTIVATION))

    def perturbation_cam(self) -> PerturbationCam:
        return cast(PerturbationCam, self._of(MethodKind.PERTURBATION))

    def network_cam(self) -> NetworkCam:
        return cast(NetworkCam, self._of(MethodKind.NETWORK))

    def _of(self, kind: MethodKind) -> CamFunction:
        """The compute function, typed by its kind: a runner can only call a method of its own kind."""
        if self.kind is not kind:
            raise TypeError(f"{self.name} is a {self.kind.value} method, not {kind.value}")
        return self.compute


METHODS: dict[str, CamMethod] = {}


Function = TypeVar("Function", bound=Callable[..., Any])


def register_method(name: str, **flags: Any) -> Callable[[Function], Function]:
    """Decorator: add a CAM function to the registry under its CLI name (flags: kind, projection, guided); what
    `gradcam methods` says of it is its note in vocab.METHOD_NOTES, written there once, torch-free."""

    def add(function: Function) -> Function:
        if name in METHODS or name not in {m.value for m in Method}:
            raise TypeError(f"CAM method '{name}': registered twice, or not in vocab.Method")
        note = METHOD_NOTES[Method(name)]
        method = CamMethod(name=name, summary=note.summary, passes=note.passes, compute=function, **flags)
        wanted = ARITY[method.kind]
        if len(inspect.signature(function).parameters) != wanted:
            raise TypeError(f"CAM method '{name}' ({method.kind.value}) must take {wanted} positional argument(s)")
        METHODS[name] = method
        return function

    return add


def get_method(name: str) -> CamMethod:
    key = name.strip().lower()
    if key in METHODS:
        return METHODS[key]
    close = closest(key, list(METHODS))
    hint = f" (did you mean '{close}'?)" if close else ""
    raise UsageError(f"unknown ⟨method⟩ '{name}'{hint}; available: {', '.join(METHODS)}")


def method_names() -> list[str]:
    return list(METHODS)
