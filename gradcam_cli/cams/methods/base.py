"""The registry and the kinds of CAM method: what every method module builds on.

A leaf for the method modules (they import this, never the package), so the
package can import them all to fill the registry without an import cycle.
Importing it does not import torch.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any
from collections.abc import Callable

from gradcam_cli.errors import UsageError

if TYPE_CHECKING:
    import torch



class MethodKind(str, Enum):
    """What a method needs from the model; `cams.py` has one runner per kind.

    Each kind fixes what `compute` receives and returns:
    - GRADIENT: (activations N×C×H×W, gradients N×C×H×W) → channel contributions N×C×H×W
    - ACTIVATION: (activations N×C×H×W, None) → channel contributions N×C×H×W; no graph built
    - PERTURBATION: (`perturb.LayerProbe`) → channel weights N×C, from extra forwards without a graph
    - NETWORK: (`maps.NetworkGradients`) → raw map N×H×W at the input size; target layers unused
    """

    GRADIENT = "gradient"
    ACTIVATION = "activation"
    PERTURBATION = "perturbation"
    NETWORK = "network"


CamFunction = Callable[..., "torch.Tensor"]


@dataclass(frozen=True)
class CamMethod:
    name: str
    summary: str
    passes: str
    compute: CamFunction
    kind: MethodKind = MethodKind.GRADIENT
    projection: bool = False  # channels reduced by the first principal component, not a sum
    guided: bool = False  # the map is multiplied by guided backpropagation at the input
    network_layers: Callable[[Any], list[Any]] | None = None  # NETWORK kind: model → the ResolvedLayers to hook


METHODS: dict[str, CamMethod] = {}


def register_method(name: str, *, summary: str, passes: str, **flags: Any) -> Callable[[CamFunction], CamFunction]:
    """Decorator: add a CAM function to the registry under its CLI name (flags: kind, projection, guided)."""

    def add(function: CamFunction) -> CamFunction:
        if name in METHODS:
            raise ValueError(f"CAM method '{name}' registered twice")
        METHODS[name] = CamMethod(name, summary, passes, function, **flags)
        return function

    return add


def get_method(name: str) -> CamMethod:
    key = name.strip().lower()
    if key in METHODS:
        return METHODS[key]
    close = difflib.get_close_matches(key, list(METHODS), n=1, cutoff=0.5)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    raise UsageError(f"unknown --method '{name}'{hint}; available: {', '.join(METHODS)}")


def method_names() -> list[str]:
    return list(METHODS)
