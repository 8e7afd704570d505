"""Segmentation models: one rule finds them, and their output read as a score map per class at the input's size.

A segmenter's forward returns a score per class and pixel, (N, C, h, w):
torchvision's `{"out": ...}`, transformers' `.logits` (at a quarter of the
input's size), a plain tensor (segmentation_models_pytorch, a user's U-Net).
The rule, one for every hub: the scores the output view picks
(model/outputs.py: `logits`, then `out`, then the first tensor) are four-
dimensional, or a 3-D segmenter's (a MONAI U-Net's) five-dimensional, (N, C,
d, h, w). C classes read by a softmax; a single channel is a binary
segmenter, read by a sigmoid. Scores smaller than the input are resized to it
bilinearly (a volume's trilinearly), as transformers'
`post_process_semantic_segmentation` does, so every region is in the input's
pixels (voxels) and maps back onto the photo (the scan) exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gradcam_cli.errors import ModelError
from gradcam_cli.model.hf_hub import segmenter_layer as hf_segmenter_layer
from gradcam_cli.model.outputs import pick_scores
from gradcam_cli.model.smp_hub import encoder_layer as smp_encoder_layer

BACKGROUND_NAMES = frozenset({"background", "__background__", "_background_", "bg"})


@dataclass(frozen=True)
class Segmenter:
    """What a run knows of a segmentation model: its classes (channels of its output)."""

    classes: int

    @property
    def binary(self) -> bool:
        """One channel: a foreground logit, read by a sigmoid."""
        return self.classes == 1

    def scores(self, output: Any, model_name: str, input_size: tuple[int, ...]) -> torch.Tensor:
        """The forward's result as (N, C, H, W) scores at the input's size `input_size` (H, W), or a volume's (N, C, D, H,
        W) at (D, H, W); still in the graph."""
        scores = output if isinstance(output, torch.Tensor) else pick_scores(output)[0]
        if scores.dim() != 2 + len(input_size) or int(scores.shape[1]) != self.classes:
            axes = ", ".join(("D", "H", "W")[-len(input_size) :])
            raise ModelError(f"{model_name} did not return its segmentation scores (N, {self.classes}, {axes}); got {tuple(scores.shape)}")
        if tuple(scores.shape[2:]) != tuple(input_size):
            mode = "trilinear" if len(input_size) == 3 else "bilinear"
            scores = F.interpolate(scores, size=tuple(input_size), mode=mode, align_corners=False)
        return scores

    def probabilities(self, scores: torch.Tensor) -> torch.Tensor:
        """(N, C, H, W) scores → each class's probability per pixel: a softmax, or a binary one's sigmoid."""
        scores = scores.detach().float()
        return scores.sigmoid() if self.binary else scores.softmax(dim=1)

    def labels(self, probabilities: torch.Tensor) -> torch.Tensor:
        """(N, H, W) (a volume's (N, D, H, W)) the class each pixel is given: the most probable; a binary one's 0 where
        its sigmoid is at least 0.5, else -1 (no class: the background)."""
        if self.binary:
            return torch.where(probabilities[:, 0] >= 0.5, 0, -1)
        return probabilities.argmax(dim=1)


def segmenter_of(shape: tuple[int, ...] | None) -> Segmenter | None:
    """The rule: a model whose scores are (N, C, h, w) segments, as does a 3-D model's (N, C, d, h, w); None for class
    scores (N, classes)."""
    if shape is None or len(shape) not in (4, 5):
        return None
    return Segmenter(int(shape[1]))


def is_background(name: str | None) -> bool:
    """A class named as the background (torchvision's VOC `__background__`): not explained unless asked for."""
    return name is not None and name.strip().lower() in BACKGROUND_NAMES


def known_layers(model: nn.Module) -> list[str] | None:
    """Where a known family's head reads its features: torchvision's segmentation backbone output (`out`, LR-ASPP's
    `high`), the layer pytorch-grad-cam's segmentation tutorial explains; a transformers segmenter's deepest feature
    map its decode head reads (model/hf_hub.py); a segmentation_models_pytorch encoder's last stage (model/smp_hub.py).
    None: the probe rule's (layers/defaults.py)."""
    layer = _torchvision_layer(model) or hf_segmenter_layer(model) or smp_encoder_layer(model)
    return [layer] if layer else None


def _torchvision_layer(model: nn.Module) -> str | None:
    backbone = getattr(model, "backbone", None)
    returned = getattr(backbone, "return_layers", None)
    if not isinstance(returned, dict) or not type(model).__module__.startswith("torchvision.models.segmentation"):
        return None
    by_key = {str(value): str(key) for key, value in returned.items()}
    layer = by_key.get("out") or by_key.get("high")
    return f"backbone.{layer}" if layer else None
