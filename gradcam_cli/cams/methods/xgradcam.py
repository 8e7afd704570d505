"""XGrad-CAM: Fu et al., "Axiom-based Grad-CAM: Towards Accurate Visualization
and Explanation of CNNs", BMVC 2020 (arXiv:2008.02312).

Channel weight = sum(gradient x activation) / (sum(activation) + eps): the
gradient averaged with the channel's own activations as weights.
"""

from __future__ import annotations


from gradcam_cli.cams.methods.base import register_method, spatial_dims

import torch

EPS = 1e-7  # the reference's stabiliser for a channel that sums to zero


@register_method("xgradcam")
def xgradcam(activations: torch.Tensor, gradients: torch.Tensor) -> torch.Tensor:
    channel_sums = activations.sum(dim=spatial_dims(activations), keepdim=True)
    weights = (gradients * activations / (channel_sums + EPS)).sum(dim=spatial_dims(activations), keepdim=True)
    return weights * activations
