"""LayerCAM: Jiang et al., "LayerCAM: Exploring Hierarchical Class Activation
Maps for Localization", IEEE TIP 30, 2021 (doi:10.1109/TIP.2021.3089943).

Each activation is weighted by its own positive gradient, element-wise, then
summed over channels; works at shallow layers too, where Grad-CAM blurs.
"""

from __future__ import annotations


from gradcam_cli.cams.methods.base import register_method

import torch


@register_method("layercam")
def layercam(activations: torch.Tensor, gradients: torch.Tensor) -> torch.Tensor:
    return gradients.clamp(min=0) * activations
