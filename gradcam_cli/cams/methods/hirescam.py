"""HiResCAM: Draelos & Carin, "Use HiResCAM instead of Grad-CAM for faithful
explanations of convolutional neural networks", 2020 (arXiv:2011.08891).

No spatial averaging of the gradient: each activation is multiplied by its own
gradient, element-wise, and the products are summed over channels.
"""

from __future__ import annotations


from gradcam_cli.cams.methods.base import register_method

import torch


@register_method("hirescam")
def hirescam(activations: torch.Tensor, gradients: torch.Tensor) -> torch.Tensor:
    return gradients * activations
