"""Element-wise Grad-CAM: the HiResCAM product with a ReLU on each element
before the channel sum, as in pytorch-grad-cam's `GradCAMElementWise`
(after Draelos & Carin, arXiv:2011.08891, and Selvaraju et al., arXiv:1610.02391).

Only positive gradient x activation evidence is summed, so negative channels
cannot cancel positive ones at a location.
"""

from __future__ import annotations


from gradcam_cli.cams.methods.base import register_method

import torch


@register_method("gradcam-elementwise")
def gradcam_elementwise(activations: torch.Tensor, gradients: torch.Tensor) -> torch.Tensor:
    return (gradients * activations).clamp(min=0)
