"""Eigen-Grad-CAM: the first principal component of gradient x activation, as in
pytorch-grad-cam's `EigenGradCAM` (Eigen-CAM applied to gradient-weighted
activations; Eigen-CAM is Muhammad & Yeasin, IJCNN 2020, arXiv:2008.00299).

The projection and its sign convention live in `projection.py`.
"""

from __future__ import annotations


from gradcam_cli.cams.methods.base import register_method

import torch


@register_method(
    "eigengradcam",
    projection=True,
)
def eigengradcam(activations: torch.Tensor, gradients: torch.Tensor) -> torch.Tensor:
    return gradients * activations
