"""FullGrad: Srinivas & Fleuret, "Full-Gradient Representation for Neural
Network Visualization", NeurIPS 2019 (arXiv:1905.00780).

The input gradient x input, plus, for every convolution and batch norm, the
gradient at its output times its bias (a batch norm's implicit bias
b - mean * w / sqrt(var + eps) in eval mode). Each part is made absolute,
min-max scaled per channel, brought to the input size and summed: a map from
the whole network, so the target layers are not used.

Per channel the reference scales by (x - min) / (max - min + 1e-7); the same
stabiliser is kept here, so channels with a vanishing gradient stay small
instead of being blown up to 1. Each layer's channels are summed at the
layer's own resolution and upsampled once (bilinear resizing is linear, so
this equals the reference's per-channel upsampling at a fraction of the memory).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gradcam_cli.geometry import resize
from gradcam_cli.cams.methods.base import MethodKind, register_method

import torch
from torch import nn

if TYPE_CHECKING:
    from gradcam_cli.maps import NetworkGradients
    from gradcam_cli.layers.paths import ResolvedLayer

SCALE_EPS = 1e-7
EIGEN_DOWNSCALE = 8  # as the reference: the eigen projection runs at 1/8 of the input size


def _has_bias_term(module: nn.Module) -> bool:
    """A Conv2d with a bias, or a BatchNorm2d whose forward is batch norm alone.

    A subclass that changes the forward (timm's BatchNormAct2d adds an
    activation) would mix the activation into the gradient at its output.
    """
    if isinstance(module, nn.Conv2d):
        return module.bias is not None
    if isinstance(module, nn.BatchNorm2d):
        plain = type(module).forward is nn.BatchNorm2d.forward or type(module).forward is nn.modules.batchnorm._BatchNorm.forward
        return plain and module.affine and module.running_mean is not None
    return False


def bias_layers(model: nn.Module) -> list[ResolvedLayer]:
    from gradcam_cli.layers.paths import ResolvedLayer

    return [ResolvedLayer(path=name, name=name, module=m) for name, m in model.named_modules() if _has_bias_term(m)]


def implicit_bias(module: nn.Module) -> torch.Tensor:
    """The per-channel bias a layer adds, whatever its input (eval-mode batch norm folds its statistics in)."""
    bias = module.bias
    if not isinstance(bias, torch.Tensor):
        raise TypeError(f"{type(module).__name__} has no bias; bias_layers() picks only layers that have one")
    if isinstance(module, nn.BatchNorm2d):
        if module.running_mean is None or module.running_var is None:
            raise TypeError("a BatchNorm2d without running statistics has no fixed bias")
        return bias - module.running_mean * module.weight / (module.running_var + module.eps).sqrt()
    return bias


def scale_channels(maps: torch.Tensor) -> torch.Tensor:
    """(N, C, h, w) → each channel's map shifted to 0 and divided by (its max + 1e-7)."""
    shifted = maps - maps.amin(dim=(2, 3), keepdim=True)
    return shifted / (shifted.amax(dim=(2, 3), keepdim=True) + SCALE_EPS)


def _parts(net: NetworkGradients) -> list[torch.Tensor]:
    """The input part (N, 3, H, W) and one (N, 1, H, W) part per bias layer."""
    size = (int(net.inputs.shape[-2]), int(net.inputs.shape[-1]))
    parts = [scale_channels((net.input_grad * net.inputs).abs().float())]
    for module, grad in net.layers:
        bias = implicit_bias(module).detach().to(grad.dtype)[None, :, None, None]
        summed = scale_channels((bias * grad).abs().float()).sum(dim=1, keepdim=True)
        parts.append(resize(summed, size))
    return parts


@register_method(
    "fullgrad",
    kind=MethodKind.NETWORK,
    network_layers=bias_layers,
)
def fullgrad(net: NetworkGradients) -> torch.Tensor:

    parts = _parts(net)
    if not net.eigen_smooth:
        return sum(part.sum(dim=1) for part in parts)  # type: ignore[return-value]
    from gradcam_cli.cams.methods.projection import first_component

    size = tuple(parts[0].shape[-2:])
    stacked = torch.cat(parts, dim=1)
    small = resize(scale_channels(stacked), (size[0] // EIGEN_DOWNSCALE, size[1] // EIGEN_DOWNSCALE))
    projected = orient(first_component(small), small)[:, None]
    return resize(scale_channels(projected), size)[:, 0]


def orient(projection: torch.Tensor, parts: torch.Tensor) -> torch.Tensor:
    """The projection (N, h, w) signed so that it grows with the parts' sum (N, C, h, w).

    The principal axis has no sign of its own, and min-max scaling (no ReLU)
    turns the wrong one into 1 - map: the least salient pixels brightest. Every
    part is a non-negative saliency, so the axis is oriented to load positively
    on the channels as a whole (the projection correlates positively with the
    plain FullGrad sum). The generic rule of `first_component` (larger extreme
    positive) inverts about half of them (most on torchvision's resnet18, see
    tests/test_fullgrad_guided.py): FullGrad's broad parts often make the low
    tail the longer one. The reference keeps whatever sign its LAPACK returns.
    """
    summed = parts.sum(dim=1)
    agreement = (projection * (summed - summed.mean(dim=(1, 2), keepdim=True))).sum(dim=(1, 2))
    return torch.where(agreement[:, None, None] < 0, -projection, projection)
