"""From a batch of input tensors to normalised maps: the heart of every run.

Extractor → layout → method → ReLU → upsample → combine layers → min-max.
Kept free of files and images so the Python API and the CLI share it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from .extractor import LayerRecorder
from .layout import Layout, LayoutHints, channels_dim_hint, detect_layout

if TYPE_CHECKING:
    import torch
    from torch import nn

    from .layers import ResolvedLayer
    from .methods import CamMethod
    from .targets import TargetChoice

EPSILON = 1e-7


@dataclass
class CamBatch:
    """Maps (N, K, H, W) in [0, 1] at the input size, with what was explained."""

    maps: "torch.Tensor"
    blank: "torch.Tensor"  # (N, K) bool: nothing survived the ReLU
    finite: "torch.Tensor"  # (N,) bool: scores and gradients were finite
    logits: "torch.Tensor"  # (N, classes)
    targets: "torch.Tensor"  # (N, K) class indices
    layouts: list[Layout]


def normalise(maps: "torch.Tensor") -> tuple["torch.Tensor", "torch.Tensor"]:
    """Per-map min-max to [0, 1]; a flat map is blank and becomes zeros, never NaN.

    Flatness is judged relative to the map's own magnitude, not in absolute
    terms: a CAM scales with the score, and models with small gradients at the
    layer (LayerScale ViTs such as timm's test_vit2 give spans near 1e-8) still
    have a real pattern. An all-zero map (nothing survived the ReLU) stays blank.
    """
    import torch

    flat = maps.flatten(start_dim=-2)
    low = flat.min(dim=-1).values[..., None, None]
    high = flat.max(dim=-1).values[..., None, None]
    span = high - low
    blank = (span <= EPSILON * torch.maximum(high.abs(), low.abs())).squeeze(-1).squeeze(-1)
    scaled = (maps - low) / span.masked_fill(span <= 0, 1.0)
    scaled = scaled.masked_fill(blank[..., None, None], 0.0)
    return scaled.clamp_(0.0, 1.0), blank


def _upsample(maps: "torch.Tensor", size: tuple[int, int]) -> "torch.Tensor":
    import torch.nn.functional as F

    if tuple(maps.shape[-2:]) == tuple(size):
        return maps
    return F.interpolate(maps[:, None], size=size, mode="bilinear", align_corners=False)[:, 0]


def layer_maps(
    method: "CamMethod",
    activations: Sequence["torch.Tensor"],
    gradients: Sequence["torch.Tensor"],
    layouts: Sequence[Layout],
    size: tuple[int, int],
) -> tuple["torch.Tensor", "torch.Tensor"]:
    """One map per image from several layers: each ReLU'd, normalised, upsampled, then averaged.

    Each layer is normalised at its own resolution, before upsampling: bilinear
    upsampling shaves a peak by an amount that depends on the layer's stride, so
    normalising afterwards would weigh coarse layers by an interpolation artefact.
    This is also pytorch-grad-cam's order, so multi-layer maps match the reference.
    """
    per_layer = []
    for activation, gradient, layout in zip(activations, gradients, layouts):
        raw = method.compute(layout.to_nchw(activation).float(), layout.to_nchw(gradient).float())
        per_layer.append(_upsample(normalise(raw.clamp(min=0))[0], size))
    if len(per_layer) == 1:
        combined = per_layer[0]
    else:
        import torch

        combined = torch.stack(per_layer).mean(dim=0)
    return normalise(combined)


def _finite_rows(*tensors: "torch.Tensor") -> "torch.Tensor":
    finite = None
    for t in tensors:
        rows = t.flatten(start_dim=1).isfinite().all(dim=1)
        finite = rows if finite is None else finite & rows
    assert finite is not None
    return finite


def compute_cams(
    model: "nn.Module",
    x: "torch.Tensor",
    layers: "Sequence[ResolvedLayer]",
    method: "CamMethod",
    targets: "TargetChoice",
    *,
    num_prefix_tokens: int | None = None,
    grid: tuple[int, int] | None = None,
    model_name: str = "the model",
) -> CamBatch:
    """One forward, one gradient pass per target rank; maps at the input tensor's size."""
    import torch

    size = (int(x.shape[-2]), int(x.shape[-1]))
    with LayerRecorder(model, list(layers), model_name) as recorder:
        logits = recorder.forward(x)
        chosen = targets.choose(logits)
        activations = recorder.activations()
        layouts = [
            detect_layout(
                tuple(a.shape), size, LayoutHints(num_prefix_tokens, grid, channels_dim_hint(layer.module)), layer.name
            )
            for a, layer in zip(activations, layers)
        ]
        finite = _finite_rows(logits.detach(), *activations)
        maps, blanks = [], []
        for k in range(chosen.shape[1]):
            score = logits.gather(1, chosen[:, k : k + 1]).sum()
            gradients = recorder.gradients(score, retain_graph=k + 1 < chosen.shape[1])
            finite &= _finite_rows(*gradients)
            cam, blank = layer_maps(method, activations, gradients, layouts, size)
            maps.append(cam)
            blanks.append(blank)
    maps_t = torch.stack(maps, dim=1).nan_to_num_(0.0)
    return CamBatch(maps_t, torch.stack(blanks, dim=1), finite, logits.detach(), chosen, layouts)
