"""The small Python API, for notebooks and tests: tensors in, maps out."""
from __future__ import annotations

from typing import TYPE_CHECKING, Union
from collections.abc import Sequence

from gradcam_cli.maps import CamOptions
from gradcam_cli.cams.engine import compute_cams
from gradcam_cli.layers.paths import ResolvedLayer, default_layer_paths, resolve_layer
from gradcam_cli.cams.methods import get_method
from gradcam_cli.cams.targets import TargetChoice

if TYPE_CHECKING:
    import torch
    from torch import nn

LayerSpec = Union[str, "nn.Module"]


def _as_resolved(model: nn.Module, layer: LayerSpec) -> ResolvedLayer:
    if isinstance(layer, str):
        return resolve_layer(model, layer, type(model).__name__)
    for name, module in model.named_modules():
        if module is layer:
            return ResolvedLayer(path=name, name=name, module=module)
    raise ValueError("a layer module passed to cam() is not part of the model")


def _as_choice(classes: int | Sequence[int] | None) -> TargetChoice:
    if classes is None:
        return TargetChoice()
    if isinstance(classes, int):
        return TargetChoice(classes=(classes,))
    return TargetChoice(classes=tuple(int(c) for c in classes), per_image=True)


def cam(
    model: nn.Module,
    x: torch.Tensor,
    layers: LayerSpec | Sequence[LayerSpec] | None = None,
    method: str = "gradcam",
    classes: int | Sequence[int] | None = None,
    *,
    grid: tuple[int, int] | None = None,
    eigen_smooth: bool = False,
    aug_smooth: bool = False,
    relu: bool = True,
    norm: str = "minmax",
    combine: str = "mean",
    cam_batch_size: int = 32,
) -> torch.Tensor:
    """Class activation maps (N, H, W) at the size of `x`, in [0, 1] unless norm="none".

    `layers` are dotted paths (negative indices allowed) or modules of `model`;
    None takes the layer `gradcam explain` would (the family default, see `gradcam layers`);
    `classes` is None (each image's top class), one index for all, or one per image.
    The other options are those of `gradcam explain` (see the README).
    The model is left exactly as it was found (hooks, train/eval mode).
    """
    if layers is None:
        layers = default_layer_paths(model)
    if isinstance(layers, str) or not isinstance(layers, Sequence):
        layers = [layers]  # type: ignore[list-item]
    resolved = [_as_resolved(model, layer) for layer in layers]  # type: ignore[union-attr]
    batch = compute_cams(
        model,
        x,
        resolved,
        get_method(method),
        _as_choice(classes),
        options=CamOptions(relu, norm, combine, eigen_smooth, aug_smooth, cam_batch_size),
        num_prefix_tokens=getattr(model, "num_prefix_tokens", None),
        grid=grid,
        model_name=type(model).__name__,
    )
    return batch.maps[:, 0]
