"""Grad-CAM++: Chattopadhyay et al., "Grad-CAM++: Improved Visual Explanations
for Deep Convolutional Networks", WACV 2018 (arXiv:1710.11063).

Channel weight = sum over positions of alpha * ReLU(gradient), with the
closed-form alpha of Eq. 19 for an exponential score:
alpha = g^2 / (2 g^2 + (sum of the channel's activations) * g^3 + eps),
and alpha = 0 where the gradient is exactly zero.
"""

from __future__ import annotations


from gradcam_cli.cams.methods.base import register_method, spatial_dims

import torch

EPS = 1e-6  # the reference's stabiliser in the alpha denominator


@register_method("gradcam++")
def gradcam_plusplus(activations: torch.Tensor, gradients: torch.Tensor) -> torch.Tensor:

    g2 = gradients.pow(2)
    g3 = g2 * gradients
    channel_sums = activations.sum(dim=spatial_dims(activations), keepdim=True)
    alpha = g2 / (2 * g2 + channel_sums * g3 + EPS)
    alpha = torch.where(gradients != 0, alpha, torch.zeros_like(alpha))
    weights = (gradients.clamp(min=0) * alpha).sum(dim=spatial_dims(activations), keepdim=True)
    return weights * activations
