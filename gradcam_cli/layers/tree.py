"""The module tree for `gradcam layers`: every module's output shape and layout in one probe."""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable

import torch
from torch import nn


def probe_shapes(
    model: nn.Module, input_hw: tuple[int, int], calls: dict[str, int] | None = None, *, input_shape: tuple[int, ...] | None = None
) -> dict[str, tuple[int, ...]]:
    """Output shape of every module in one no-grad forward, in the order modules last finished; `calls`, when given,
    counts how often each module ran (a shared activation runs in every stage). `input_shape` (C, T, H, W): a clip's."""
    from gradcam_cli.model.state import eval_mode, first_tensor

    shapes: dict[str, tuple[int, ...]] = {}

    def hook_for(name: str) -> Callable[..., None]:
        def hook(_m: nn.Module, _i: object, out: object) -> None:
            tensor = first_tensor(out)
            if calls is not None:
                calls[name] = calls.get(name, 0) + 1
            if tensor is not None:
                shapes.pop(name, None)  # re-insert: a reused module counts at its last call
                shapes[name] = tuple(tensor.shape)

        return hook

    handles = [module.register_forward_hook(hook_for(name)) for name, module in model.named_modules()]
    parameter = next(iter(model.parameters()), None)
    device = parameter.device if parameter is not None else None  # the API's model may sit on a GPU already
    try:
        with eval_mode(model), torch.no_grad():
            model(torch.zeros(1, *(input_shape or (3, *input_hw)), device=device))
    finally:
        for handle in handles:
            handle.remove()
    return shapes


def is_spatial(shape: tuple[int, ...]) -> bool:
    """A map a CAM can show: N×C×H×W with more than one position each way."""
    return len(shape) == 4 and min(shape[-2:]) > 1


def spatial_sizes(model: nn.Module, input_hw: tuple[int, int], *, once: bool = False) -> dict[str, tuple[int, int]]:
    """Each module whose probe output is a map or a token grid (a ViT's, MViT's, Twins'), its grid; in finishing order.

    Token sequences count as a run reads them (layout.py), so a transformer's
    stages are found like a CNN's; outputs of more than the probe's one image
    (windows, inner pixel tokens) are no map of the image. With `once`, a module
    that ran more than once (a shared activation) is left out: where it
    finished says nothing of where a stage ends.
    """
    from gradcam_cli.errors import LayoutError
    from gradcam_cli.layout import LayoutHints, detect_layout, patch_grid

    hints = LayoutHints(getattr(model, "num_prefix_tokens", None), patch_grid=patch_grid(model, input_hw))
    sizes: dict[str, tuple[int, int]] = {}
    calls: dict[str, int] = {}
    for name, shape in probe_shapes(model, input_hw, calls).items():
        if not name or shape[0] != 1 or (once and calls.get(name, 0) > 1):
            continue
        if is_spatial(shape):
            sizes[name] = (shape[-2], shape[-1])
        elif len(shape) == 3:
            try:
                grid = detect_layout(shape, input_hw, hints).grid
            except LayoutError:
                continue
            if min(grid) > 1:
                sizes[name] = grid
    return sizes


@dataclass(frozen=True)
class LayerRow:
    """One module in `gradcam layers`: where it is, what it outputs, whether it is the default."""

    name: str
    type_name: str
    depth: int
    shape: tuple[int, ...] | None
    layout: str | None
    is_default: bool


def layer_rows(
    model: nn.Module,
    input_hw: tuple[int, int],
    default_names: list[str],
    num_prefix_tokens: int | None = None,
) -> list[LayerRow]:
    """Every module with the output shape and layout seen in one probe forward.

    Layouts are read as a run reads them (same hints, patch grid included),
    so the table shows the grid `explain` will use.
    """
    from gradcam_cli.layout import LayoutHints, channels_dim_hint, detect_layout, patch_grid

    patches = patch_grid(model, input_hw)

    def layout(_name: str, module: nn.Module, shape: tuple[int, ...]) -> str:
        hints = LayoutHints(num_prefix_tokens, None, channels_dim_hint(module), patches)
        return detect_layout(shape, input_hw, hints).describe()

    return _rows(model, probe_shapes(model, input_hw), (3, 4), layout, default_names)


def clip_layer_rows(model: nn.Module, input_size: tuple[int, int, int], default_names: list[str]) -> list[LayerRow]:
    """`layer_rows` for a model that takes clips or volumes: one probe forward of a (3, T, H, W) clip, each output read
    as a run reads a clip's layers (layout_3d.py: the module's type, the model's own token grid)."""
    from gradcam_cli.layout_3d import LayoutHints3d, channels_dim_hint_3d, detect_layout_3d, mvit_token_grid

    def layout(name: str, module: nn.Module, shape: tuple[int, ...]) -> str:
        hints = LayoutHints3d(channels_dim_hint_3d(module), token_grid=mvit_token_grid(model, name) if len(shape) == 3 else None)
        return detect_layout_3d(shape, input_size, hints).describe()

    shapes = probe_shapes(model, (input_size[1], input_size[2]), input_shape=(3, *input_size))
    return _rows(model, shapes, (3, 5), layout, default_names)


def _rows(
    model: nn.Module,
    shapes: dict[str, tuple[int, ...]],
    ranks: tuple[int, ...],
    layout: Callable[[str, nn.Module, tuple[int, ...]], str],
    default_names: list[str],
) -> list[LayerRow]:
    """A row per module: its probed shape, and for an output of one of `ranks` its layout as `layout` reads it ("?":
    none fits)."""
    from gradcam_cli.errors import LayoutError

    rows = []
    for name, module in model.named_modules():
        shape = shapes.get(name)
        described = None
        if shape is not None and len(shape) in ranks and name:
            try:
                described = layout(name, module, shape)
            except LayoutError:
                described = "?"
        depth = name.count(".") + 1 if name else 0
        rows.append(LayerRow(name or "(model)", type(module).__name__, depth, shape, described, name in default_names))
    return rows
