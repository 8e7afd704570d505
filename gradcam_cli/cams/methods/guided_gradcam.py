"""Guided Grad-CAM: Selvaraju et al., ICCV 2017 (arXiv:1610.02391), Section 3.

Grad-CAM says where, guided backpropagation says which pixels: their product
is a sharp, class-discriminative map at the input's resolution. The guided
pass is in `guided.py`; `--save-guided` also writes the RGB product image.
"""

from __future__ import annotations


from gradcam_cli.cams.methods.base import register_method
from gradcam_cli.cams.methods.gradcam import gradcam

import torch


@register_method(
    "guided-gradcam",
    guided=True,
)
def guided_gradcam(activations: torch.Tensor, gradients: torch.Tensor) -> torch.Tensor:
    return gradcam(activations, gradients)
