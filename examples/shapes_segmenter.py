"""A small U-Net semantic segmenter for the synthetic shapes scenes.

Why: explaining a segmenter (a heat map for the pixels of one class) needs a
segmenter whose right answers are known, offline, and small enough to ship in
the repository.  ``build()`` returns a plain :class:`torch.nn.Module`, a four-level
U-Net (0.92 M parameters, 3.7 MB in fp32), trained by
``train_example_segmenter.py`` on scenes from ``shapes.make_segmentation_scene``.

A U-Net, not a DeepLab-style head on a strided backbone: the shapes are only
30-100 px across, so a one-pixel error along their outline already costs a few
points of IoU; skip connections at every scale give the decoder the full-size
edges back.  Most of the parameters sit at strides 8 and 16, where they are
cheap; the full-resolution levels stay at 16 channels, since they dominate the
CPU time of a training step.

Classes (the output channel, the pixel value of a truth mask, and the line of
``shapes_segmenter_model/labels.txt``): 0 background, 1 circle, 2 square,
3 triangle, 4 star, that is ``1 + shapes.CLASSES`` index for a shape.

Input: ``(N, 3, H, W)`` float RGB scaled to [0, 1], then normalised with
mean = std = 0.5 (so in [-1, 1]); any ``H`` and ``W`` that are multiples of 16
(four 2x poolings).  It was trained on 128x128 scenes and validated on 256x192
and 192x256 ones (shapes 30-100 px across).  Output: a plain tensor of
logits ``(N, num_classes, H, W)``, at the input's size, not a dict.  Modules
are named for the target-layer options of ``gradcam``: ``encoder.0``..``encoder.3``,
``bottleneck``, ``decoder.0``..``decoder.3`` (coarse to fine) and ``head``.
ReLUs are not in-place, so hooks see each activation as it was.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["MEAN", "STD", "SegBlock", "ShapesUNet", "build", "confusion", "iou_from_confusion", "segmentation_metrics"]

MEAN = STD = (0.5, 0.5, 0.5)
# Channels of encoder.0..3 (strides 1, 2, 4, 8) and of the bottleneck (stride 16).
# Full resolution is the expensive part on CPU, so it stays narrow.
_CHANNELS = (16, 32, 64, 96)
_BOTTLENECK = 128


class SegBlock(nn.Sequential):
    """Two 3x3 convs, each BatchNorm + (non-inplace) ReLU: U-Net's basic unit."""

    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__(
            nn.Conv2d(c_in, c_out, 3, padding=1, bias=False),
            nn.BatchNorm2d(c_out),
            nn.ReLU(),
            nn.Conv2d(c_out, c_out, 3, padding=1, bias=False),
            nn.BatchNorm2d(c_out),
            nn.ReLU(),
        )


class ShapesUNet(nn.Module):
    """Encoder (max-pool between levels), bottleneck, decoder (bilinear 2x up + skip concat), 1x1 head."""

    def __init__(self, num_classes: int = 5, channels: tuple[int, ...] = _CHANNELS, bottleneck: int = _BOTTLENECK) -> None:
        super().__init__()
        ins = (3, *channels[:-1])
        self.encoder = nn.ModuleList(SegBlock(i, o) for i, o in zip(ins, channels))
        self.bottleneck = SegBlock(channels[-1], bottleneck)
        ups = (bottleneck, *channels[:0:-1])  # what arrives from below at each decoder level
        self.decoder = nn.ModuleList(SegBlock(u + s, s) for u, s in zip(ups, channels[::-1]))
        self.head = nn.Conv2d(channels[0], num_classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] % 16 or x.shape[-2] % 16:
            raise ValueError(f"height and width must be multiples of 16, got {tuple(x.shape[-2:])}")
        skips = []
        for level, block in enumerate(self.encoder):
            x = block(x if level == 0 else F.max_pool2d(x, 2))
            skips.append(x)
        x = self.bottleneck(F.max_pool2d(x, 2))
        for block, skip in zip(self.decoder, reversed(skips)):
            x = F.interpolate(x, size=skip.shape[-2:], mode="bilinear", align_corners=False)
            x = block(torch.cat([x, skip], 1))
        return self.head(x)


def build(num_classes: int = 5) -> ShapesUNet:
    """The untrained example segmenter; load ``shapes_segmenter.safetensors`` into it (``strict=True``)."""
    return ShapesUNet(num_classes)


def normalise(images: torch.Tensor) -> torch.Tensor:
    """uint8 (or [0, 1] float) ``(N, 3, H, W)`` images to the model's input: [0, 1], then mean = std = 0.5."""
    x = images.float() / 255 if images.dtype == torch.uint8 else images.float()
    mean = torch.tensor(MEAN, device=x.device)[:, None, None]
    std = torch.tensor(STD, device=x.device)[:, None, None]
    return (x - mean) / std


def confusion(pred: torch.Tensor, truth: torch.Tensor, num_classes: int = 5) -> torch.Tensor:
    """``(num_classes, num_classes)`` pixel counts, rows the truth, columns the prediction."""
    idx = truth.reshape(-1).long() * num_classes + pred.reshape(-1).long()
    return torch.bincount(idx, minlength=num_classes * num_classes).reshape(num_classes, num_classes)


def iou_from_confusion(conf: torch.Tensor) -> dict[str, float | list[float]]:
    """Per-class IoU (intersection over union of pixels, pooled over all images) and their mean.

    Pooling over images, not averaging per image, keeps a class that is absent
    from most scenes from being judged on a handful of pixels.  A class absent
    from both truth and prediction gets NaN and is left out of the mean.
    """
    conf = conf.double()
    inter = conf.diag()
    union = conf.sum(0) + conf.sum(1) - inter
    iou = torch.where(union > 0, inter / union.clamp(min=1), torch.tensor(float("nan"), dtype=torch.float64))
    present = ~torch.isnan(iou)
    return {"iou": iou.tolist(), "mIoU": float(iou[present].mean()) if present.any() else float("nan")}


@torch.inference_mode()
def segmentation_metrics(model: nn.Module, scenes: list[tuple[torch.Tensor, torch.Tensor]], batch: int = 16) -> dict:
    """Per-class IoU and mean IoU of ``model`` on ``scenes``.

    ``scenes`` are ``(image, mask)`` pairs: a uint8 ``(3, H, W)`` image and an
    integer ``(H, W)`` class mask, sizes free (consecutive scenes of one size
    share a batch).  Returns ``{"iou": [background, circle, ...], "mIoU": ...}``
    (see :func:`iou_from_confusion`).  The model is put in eval mode.
    """
    model.eval()
    num_classes = model.head.out_channels
    conf = torch.zeros(num_classes, num_classes, dtype=torch.long)
    i = 0
    while i < len(scenes):
        part = [scenes[i]]
        while len(part) < batch and i + len(part) < len(scenes) and scenes[i + len(part)][0].shape == part[0][0].shape:
            part.append(scenes[i + len(part)])
        i += len(part)
        pred = model(normalise(torch.stack([img for img, _ in part]))).argmax(1)
        conf += confusion(pred, torch.stack([m for _, m in part]), num_classes)
    return iou_from_confusion(conf)
