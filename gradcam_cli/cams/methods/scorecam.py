"""Score-CAM: Wang et al., "Score-CAM: Score-Weighted Visual Explanations for
Convolutional Neural Networks", CVPR Workshops 2020 (arXiv:1910.01279).

Each channel, upsampled to the input and min-max scaled, masks the input; the
class score of the masked input, softmaxed over channels, weighs the channel.
No gradients: C forwards per image, run in chunks of --cam-batch-size.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gradcam_cli.cams.methods.base import MethodKind, register_method

import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from gradcam_cli.extract.perturb import LayerProbe

MASK_EPS = 1e-8  # the reference's stabiliser in the per-channel min-max


@register_method(
    "scorecam",
    kind=MethodKind.PERTURBATION,
)
def scorecam(probe: LayerProbe) -> torch.Tensor:

    size = tuple(probe.x.shape[-2:])

    def masked_inputs(images: torch.Tensor, channels: torch.Tensor) -> torch.Tensor:
        maps = probe.activations[images, channels][:, None]  # B x 1 x h x w
        # the reference upsamples with nn.UpsamplingBilinear2d, i.e. align_corners=True
        masks = F.interpolate(maps, size=size, mode="bilinear", align_corners=True)
        low = masks.amin(dim=(2, 3), keepdim=True)
        high = masks.amax(dim=(2, 3), keepdim=True)
        masks = (masks - low) / (high - low + MASK_EPS)
        return probe.x[images] * masks.to(probe.x.dtype)

    return torch.softmax(probe.scores_of_inputs(masked_inputs), dim=1)
