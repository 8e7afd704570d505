"""The default target layer: the one a careful user would pick for the model's family.

Each hub knows the look of its own models (model/hub.py: ModelSource.default_layer);
a model no hub has a rule for gets the last module that outputs a spatial map.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gradcam_cli.errors import LayerError
from gradcam_cli.layers.tree import is_spatial, probe_shapes
from gradcam_cli.model.data_config import default_input_hw
from gradcam_cli.model.hub import SOURCES

from torch import nn

if TYPE_CHECKING:
    from gradcam_cli.model.hub import ModelSource


def default_layer_paths(model: nn.Module, arch: str = "", source: ModelSource | None = None) -> list[str]:
    """The layer a careful user would pick: last spatial map the head still sees.

    The model's own hub is asked first, then every hub in registry order (a
    model built elsewhere may still have a known look); source None, for a
    bare module as the Python API gets, asks the registry only.
    """
    hubs = SOURCES if source is None else (source, *SOURCES)
    path = next((found for hub in hubs if (found := hub.default_layer(model, arch)) is not None), None)
    if path is None:
        path = _last_spatial_module(model)
    return [path]


def _last_spatial_module(model: nn.Module) -> str:
    """Fallback: the outermost module that last produced a 4-D map in a probe forward."""
    shapes = probe_shapes(model, default_input_hw(model))
    # forward hooks fire when a module ends, so a stage comes after its last conv
    spatial = [name for name, shape in shapes.items() if name and is_spatial(shape)]
    if not spatial:
        raise LayerError("no layer of this model outputs a spatial map; name one with ⟨layers⟩")
    return spatial[-1]
