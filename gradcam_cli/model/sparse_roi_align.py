"""RoIAlign whose backward visits only the regions that carry a gradient: one detection's, not the thousand proposals'.

A two-stage detector pools every proposal (about a thousand an image) from
the feature maps; one detection's score depends on one of them. torchvision's
backward kernel still walks every region, bins and channels included, whatever
its gradient: for Faster R-CNN on the CPU that is most of the cost of a
detection's map. This one computes the same forward with torchvision's own
kernel and hands its backward kernel only the regions whose gradient is not
zero; the input's gradient is the same, exactly (the regions left out would
add zeros). While a detection is explained, `torchvision.ops.poolers` uses it
(model/detectors.py: TorchvisionDetectors.explaining).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch


class _SparseBackwardRoIAlign(torch.autograd.Function):
    """torchvision::roi_align forward; backward over the regions with a gradient only."""

    @staticmethod
    def forward(
        ctx: Any, features: torch.Tensor, rois: torch.Tensor, pooled: tuple[int, int], scale: float, sampling: int, aligned: bool
    ) -> torch.Tensor:  # noqa: E501
        ctx.save_for_backward(rois)
        ctx.settings = (pooled, scale, sampling, aligned, tuple(features.shape))
        return torch.ops.torchvision.roi_align(features, rois, scale, pooled[0], pooled[1], sampling, aligned)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        (rois,) = ctx.saved_tensors
        pooled, scale, sampling, aligned, (n, c, h, w) = ctx.settings
        live = grad.flatten(1).ne(0).any(dim=1).nonzero().flatten()
        if not len(live):
            return grad.new_zeros((n, c, h, w)), None, None, None, None, None
        features = torch.ops.torchvision._roi_align_backward(
            grad[live].contiguous(), rois[live], scale, pooled[0], pooled[1], n, c, h, w, sampling, aligned
        )
        return features, None, None, None, None, None


def sparse_roi_align(
    features: torch.Tensor, boxes: Any, output_size: Any, spatial_scale: float = 1.0, sampling_ratio: int = -1, aligned: bool = False
) -> torch.Tensor:
    """torchvision.ops.roi_align's signature; the sparse backward where it applies (regions as one (K, 5) tensor)."""
    from torchvision.ops import roi_align

    if not isinstance(boxes, torch.Tensor) or features.is_quantized or not features.requires_grad:
        return roi_align(features, boxes, output_size, spatial_scale, sampling_ratio, aligned)
    pooled = (output_size, output_size) if isinstance(output_size, int) else (int(output_size[0]), int(output_size[1]))
    return _SparseBackwardRoIAlign.apply(features, boxes, pooled, float(spatial_scale), int(sampling_ratio), bool(aligned))


@contextlib.contextmanager
def pooling_sparsely() -> Iterator[None]:
    """torchvision's pooler (MultiScaleRoIAlign) uses the sparse backward while inside; its own roi_align after."""
    import torchvision.ops.poolers as poolers

    own = poolers.roi_align
    poolers.roi_align = sparse_roi_align
    try:
        yield
    finally:
        poolers.roi_align = own
