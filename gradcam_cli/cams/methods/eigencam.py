"""Eigen-CAM: Muhammad & Yeasin, "Eigen-CAM: Class Activation Map using
Principal Components", IJCNN 2020 (arXiv:2008.00299).

The first principal component of the layer's activations, no gradient at all:
one forward pass that builds no graph. The map does not depend on the class,
so it shows what the layer finds salient, not why a class won.
"""

from __future__ import annotations


from gradcam_cli.cams.methods.base import MethodKind, register_method

import torch


@register_method(
    "eigencam",
    kind=MethodKind.ACTIVATION,
    projection=True,
)
def eigencam(activations: torch.Tensor, _gradients: torch.Tensor | None) -> torch.Tensor:
    return activations
