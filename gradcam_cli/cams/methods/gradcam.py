"""Grad-CAM: Selvaraju et al., "Grad-CAM: Visual Explanations from Deep Networks
via Gradient-based Localization", ICCV 2017 (arXiv:1610.02391).

Each channel is weighted by the spatial mean of the score's gradient over it.
"""

from __future__ import annotations


from gradcam_cli.cams.methods.base import register_method, spatial_dims

import torch


@register_method("gradcam")
def gradcam(activations: torch.Tensor, gradients: torch.Tensor) -> torch.Tensor:
    weights = gradients.mean(dim=spatial_dims(activations), keepdim=True)
    return weights * activations
