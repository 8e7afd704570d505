"""Ablation-CAM: Desai & Ramaswamy, "Ablation-CAM: Visual Explanations for Deep
Convolutional Network via Gradient-free Localization", WACV 2020.

Each channel's weight is the relative drop of the class score when that
channel of the layer's output is set to zero: (score - ablated) / score.

Deliberate difference from pytorch-grad-cam: the paper sets the channel to
zero, and so do we. The reference does so only when the layer's smallest
value is exactly 0 (post-ReLU layers), and otherwise writes (minimum - 1e7),
which for signed layers (LayerNorm in a ViT) turns the scores into noise from
a value no trained network has seen. Post-ReLU layers give the same map on
both sides.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gradcam_cli.cams.methods.base import MethodKind, register_method

import torch

if TYPE_CHECKING:
    from gradcam_cli.extract.perturb import LayerProbe


@register_method(
    "ablationcam",
    kind=MethodKind.PERTURBATION,
)
def ablationcam(probe: LayerProbe) -> torch.Tensor:
    original = probe.target_scores()[:, None]
    ablated = probe.scores_with_channel_ablated()
    return (original - ablated) / original
