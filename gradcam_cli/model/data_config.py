"""A model's own preprocessing and input size, as the hubs describe them.

Its own module so that the hubs can build one without importing the loader
that imports them.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

DEFAULT_INPUT_HW = (224, 224)
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)  # what a model without a data config is given
# each interpolation's Pillow filter number (Image.Resampling), as timm names them and transformers' processors number them
PIL_RESAMPLE = {"bilinear": 2, "bicubic": 3, "nearest": 0, "lanczos": 1, "box": 4, "hamming": 5}


@dataclass(frozen=True)
class DataConfig:
    """The model's own preprocessing (timm data config or torchvision weights' transforms)."""

    input_hw: tuple[int, int]
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    interpolation: str = "bilinear"
    crop_pct: float = 1.0
    crop_mode: str = "center"
    fit: str = "stretch"  # without crop, how the photo fills the input: stretched to it, or "letterbox" (a detector's)
    pad: int = 0  # the value (0-255, before normalisation) of the input pixels no photo covers: Ultralytics' letterbox is grey 114
    clip_length: int | None = None  # a video classifier's frames per clip (its input N×C×T×H×W); None: the model takes images

    @property
    def input_size(self) -> tuple[int, ...]:
        """The size of one input, as the maps come: (H, W), or (T, H, W) for a model that takes clips."""
        return self.input_hw if self.clip_length is None else (self.clip_length, *self.input_hw)


def default_input_hw(model: nn.Module) -> tuple[int, int]:
    """The input size the model was made for; used for probes."""
    cfg = getattr(model, "pretrained_cfg", None) or {}
    size = cfg.get("input_size")
    if size and len(size) == 3:
        return int(size[1]), int(size[2])
    image_size = getattr(model, "image_size", None)  # torchvision ViT
    if isinstance(image_size, int):
        return image_size, image_size
    return DEFAULT_INPUT_HW
