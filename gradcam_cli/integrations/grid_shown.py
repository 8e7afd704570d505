"""Several methods or layers asked of a training callback: one picture per image and class, a grid of their overlays.

Rows are the methods, columns the layers, drawn by `gradcam compare`'s grid (outputs/grid.py), so the two read alike.
Each cell is its (method, layer)'s overlay at the photo's own size (a photo under MIN_CELL pixels is scaled up to it,
so the labels can be read); the cells stay on the grid's `Shown` for the trackers' per-cell records.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
from PIL import Image
from torch import nn

from gradcam_cli.cams.methods import get_method
from gradcam_cli.api_arguments import LayerSpec
from gradcam_cli.errors import UsageError
from gradcam_cli.integrations.shown import Shown
from gradcam_cli.outputs.grid import draw_grid
from gradcam_cli.vocab import Colormap

MIN_CELL = 128  # pixels on a cell's longest side at least: a 32x32 photo's labels would not fit beside it


def checked_methods(method: str | Sequence[str]) -> list[str]:
    """The method names asked, each known (a UsageError naming a wrong one, and what there is)."""
    methods = [method] if isinstance(method, str) else list(method)
    if not methods or not all(isinstance(m, str) for m in methods):
        raise UsageError(f"method must be a method's name or a list of them, not {method!r}")
    for name in methods:
        get_method(name)
    return methods


def layer_list(layers: LayerSpec | Sequence[LayerSpec] | None) -> list[LayerSpec | None]:
    """The layers as the grid's columns: None (the default layer) one column, a path or module one, a list each."""
    if layers is None or isinstance(layers, (str, nn.Module)):
        return [layers]
    return list(layers)


def layer_label(model: nn.Module, layer: LayerSpec | None) -> str:
    """A layer as records and labels name it: its path, a module's own path in the model, or `default`."""
    if layer is None:
        return "default"
    if isinstance(layer, nn.Module):
        return next((name for name, module in model.named_modules() if module is layer), type(layer).__name__)
    return str(layer)


def grid_of(cells: Sequence[Shown], photo: np.ndarray, methods: Sequence[str], layers: Sequence[str], colormap: str) -> Shown:
    """One image's and class's cells, `methods` x `layers` row by row, drawn as one grid; the first cell's names."""
    first = cells[0]
    rgb = [np.asarray(cell.overlay) for cell in cells]
    rows = [rgb[r * len(layers) : (r + 1) * len(layers)] for r in range(len(methods))]
    side = max(MIN_CELL, *photo.shape[:2])
    header = f"{first.class_name} p={first.probability:.2f} · {first.image}"
    grid = draw_grid(photo, rows, rows=methods, columns=layers, header=header, cell=side, colormap=Colormap(colormap))
    return replace(first, overlay=Image.fromarray(grid.picture), method="", layer="", cells=tuple(cells), boxes=grid.cells)
