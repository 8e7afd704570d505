"""The CAM method registry: one small module per method, one name each.

Importing this package does not import torch, so the CLI can list and check
method names before anything heavy loads.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from ..errors import UsageError

if TYPE_CHECKING:
    import torch

# (activations N×C×H×W, gradients N×C×H×W) → raw map N×H×W, before ReLU
CamFunction = Callable[["torch.Tensor", "torch.Tensor"], "torch.Tensor"]


@dataclass(frozen=True)
class CamMethod:
    name: str
    summary: str
    passes: str
    compute: CamFunction


METHODS: dict[str, CamMethod] = {}


def register_method(name: str, *, summary: str, passes: str) -> Callable[[CamFunction], CamFunction]:
    """Decorator: add a CAM function to the registry under its CLI name."""

    def add(function: CamFunction) -> CamFunction:
        if name in METHODS:
            raise ValueError(f"CAM method '{name}' registered twice")
        METHODS[name] = CamMethod(name, summary, passes, function)
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


from . import gradcam as _gradcam  # noqa: E402,F401  (registers itself)
from . import hirescam as _hirescam  # noqa: E402,F401
from . import gradcam_elementwise as _gradcam_elementwise  # noqa: E402,F401
from . import gradcam_plusplus as _gradcam_plusplus  # noqa: E402,F401
from . import xgradcam as _xgradcam  # noqa: E402,F401
from . import layercam as _layercam  # noqa: E402,F401
from . import eigengradcam as _eigengradcam  # noqa: E402,F401
