"""Eigen-Grad-CAM: the first principal component of gradient x activation, as in
pytorch-grad-cam's `EigenGradCAM`; Eigen-CAM is Muhammad & Yeasin, "Eigen-CAM:
Class Activation Map using Principal Components", IJCNN 2020 (arXiv:2008.00299).

Per image, the (H*W) x C matrix of gradient x activation is centred per channel
and projected on its first right singular vector.

Sign: a singular vector is defined only up to sign, and the reference keeps
whatever its LAPACK build returns, which no convention reproduces. Here the
sign is fixed deterministically: the projection is flipped when its most
negative value outweighs its most positive one, so the stronger side survives
the ReLU and the same input always gives the same map.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from . import register_method

if TYPE_CHECKING:
    import torch


@register_method(
    "eigengradcam",
    summary="first principal component of gradient x activation; smooth, less noisy maps",
    passes="1 forward + 1 backward to the layer, 1 SVD per image",
)
def eigengradcam(activations: "torch.Tensor", gradients: "torch.Tensor") -> "torch.Tensor":
    import torch

    n, c, h, w = activations.shape
    product = (gradients * activations).nan_to_num(nan=0.0)
    rows = product.reshape(n, c, h * w).transpose(1, 2)  # N x HW x C
    centred = rows - rows.mean(dim=1, keepdim=True)
    _, _, vh = torch.linalg.svd(centred, full_matrices=False)
    projection = (centred @ vh[:, 0, :, None]).squeeze(-1)  # N x HW
    flip = projection.amin(dim=1).abs() > projection.amax(dim=1).abs()
    projection = torch.where(flip[:, None], -projection, projection)
    return projection.reshape(n, h, w)
