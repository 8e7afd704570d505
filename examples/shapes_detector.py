"""A small torchvision FCOS detector for the synthetic shapes scenes.

Why: explaining a detector (one heat map per detected object) needs a detector
whose right answers are known, offline, and small enough to ship in the
repository.  ``build()`` returns a torchvision :class:`~torchvision.models.detection.FCOS`
on a tiny CNN + :class:`~torchvision.ops.FeaturePyramidNetwork` backbone
(0.75 M parameters, 3.0 MB in fp32), trained by ``train_example_detector.py``
on scenes from ``shapes.make_detection_scene``.

FCOS, not Faster R-CNN: it is anchor-free with one prediction per feature-map
location, so it has few hyper-parameters to get wrong and trains from scratch
on CPU in minutes.

Labels: FCOS scores each class with its own sigmoid, so there is no background
class and no index reserved for it.  ``num_classes=4`` and the label the model
predicts is the index into ``shapes.CLASSES`` (and the line of
``shapes_detector_model/labels.txt``): 0 circle, 1 square, 2 triangle, 3 star.

Inputs: a list of float RGB tensors in [0, 1], any size; the detector's own
transform resizes each so the short side is 256 px (long side at most 320 px)
and normalises with mean = std = 0.5.  Boxes come back in the input's pixels.
Nothing is ever downloaded (no pretrained weights exist for this backbone).
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch import nn
from torchvision.models.detection import FCOS
from torchvision.models.detection.anchor_utils import AnchorGenerator
from torchvision.models.detection.fcos import FCOSHead
from torchvision.ops import FeaturePyramidNetwork, box_iou
from torchvision.ops.misc import Conv2dNormActivation

__all__ = ["MAX_SIZE", "MIN_SIZE", "TinyBackbone", "build", "detection_metrics", "match_image"]

MIN_SIZE, MAX_SIZE = 256, 320
# Channels of the stem and the four stride-2 stages; the last three feed the FPN
# (strides 8, 16, 32).  Shapes span ~50-120 px at the input size, so stride 8 is
# fine enough and stride 32 sees a whole shape with its surroundings.
_STAGES = (16, 32, 64, 96, 128)
_FPN_CHANNELS = 64
_STRIDES = (8, 16, 32)


def _stage(c_in: int, c_out: int) -> nn.Sequential:
    """Stride-2 conv then a stride-1 conv, both 3x3 + BatchNorm + ReLU."""
    return nn.Sequential(Conv2dNormActivation(c_in, c_out, stride=2), Conv2dNormActivation(c_out, c_out))


class TinyBackbone(nn.Module):
    """Five stride-2 stages (overall stride 32) and an FPN over the last three.

    ``out_channels`` is the attribute torchvision detectors read to size their heads.
    """

    def __init__(self) -> None:
        super().__init__()
        c = _STAGES
        self.stem = Conv2dNormActivation(3, c[0], stride=2)
        self.stages = nn.ModuleList(_stage(c[i], c[i + 1]) for i in range(len(c) - 1))
        self.fpn = FeaturePyramidNetwork(list(c[-3:]), _FPN_CHANNELS)
        self.out_channels = _FPN_CHANNELS

    def forward(self, x: torch.Tensor) -> OrderedDict[str, torch.Tensor]:
        x = self.stem(x)
        feats: OrderedDict[str, torch.Tensor] = OrderedDict()
        for i, stage in enumerate(self.stages):
            x = stage(x)
            if i >= len(self.stages) - 3:
                feats[f"p{i + 1}"] = x
        return self.fpn(feats)


def build(num_classes: int = 4) -> FCOS:
    """The untrained example detector; load ``shapes_detector.safetensors`` into it.

    ``score_thresh`` is low (0.05) so that mAP can be computed from the raw
    output; callers that want confident boxes filter on ``scores`` themselves.
    """
    anchors = AnchorGenerator(tuple((s,) for s in _STRIDES), ((1.0,),) * len(_STRIDES))
    head = FCOSHead(_FPN_CHANNELS, anchors.num_anchors_per_location()[0], num_classes, num_convs=2)
    return FCOS(
        TinyBackbone(),
        num_classes,
        min_size=MIN_SIZE,
        max_size=MAX_SIZE,
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
        anchor_generator=anchors,
        head=head,
        score_thresh=0.05,
        detections_per_img=20,
    )


def match_image(
    boxes: torch.Tensor, labels: torch.Tensor, scores: torch.Tensor, gt_boxes: torch.Tensor, gt_labels: torch.Tensor, iou: float = 0.5
) -> torch.Tensor:
    """Greedy matching by score: which detections are true positives.

    Detections are visited from the highest score down; each takes the unmatched
    ground-truth box of its class with the highest IoU, if that IoU is at least
    ``iou``.  Returns a bool tensor aligned with ``boxes`` (the usual VOC/COCO rule).
    """
    tp = torch.zeros(len(boxes), dtype=torch.bool)
    if len(boxes) == 0 or len(gt_boxes) == 0:
        return tp
    ious = box_iou(boxes.float(), gt_boxes.float())
    ious[labels[:, None] != gt_labels[None, :]] = -1.0
    taken = torch.zeros(len(gt_boxes), dtype=torch.bool)
    for i in torch.argsort(scores, descending=True).tolist():
        row = ious[i].masked_fill(taken, -1.0)
        j = int(row.argmax())
        if row[j] >= iou:
            tp[i] = True
            taken[j] = True
    return tp


def _average_precision(scores: torch.Tensor, tp: torch.Tensor, n_gt: int) -> float:
    """Area under the all-point interpolated precision/recall curve (VOC 2010+)."""
    if n_gt == 0:
        return float("nan")
    order = torch.argsort(scores, descending=True)
    hits = tp[order].float()
    recall = torch.cat([torch.zeros(1), hits.cumsum(0) / n_gt])
    precision = torch.cat([torch.ones(1), hits.cumsum(0) / torch.arange(1, len(hits) + 1)])
    precision = torch.flip(torch.cummax(torch.flip(precision, [0]), 0).values, [0])  # monotone envelope
    return float(((recall[1:] - recall[:-1]) * precision[1:]).sum())


def detection_metrics(
    outputs: list[dict[str, torch.Tensor]], targets: list[dict[str, torch.Tensor]], iou: float = 0.5, score: float = 0.5
) -> dict[str, float]:
    """Precision and recall at (``iou``, ``score``), and mAP at ``iou`` over all scores.

    ``outputs`` are the detector's eval-mode dicts, ``targets`` the ground truth
    (``boxes``, ``labels``), one per image.  Precision/recall count only
    detections scoring at least ``score``; mAP averages per-class AP over the
    classes present in ``targets``.
    """
    n_tp = n_det = n_gt = 0
    per_class: dict[int, tuple[list[torch.Tensor], list[torch.Tensor], int]] = {}
    for out, tgt in zip(outputs, targets):
        keep = out["scores"] >= score
        tp = match_image(out["boxes"][keep], out["labels"][keep], out["scores"][keep], tgt["boxes"], tgt["labels"], iou)
        n_tp, n_det, n_gt = n_tp + int(tp.sum()), n_det + int(keep.sum()), n_gt + len(tgt["labels"])
        tp_all = match_image(out["boxes"], out["labels"], out["scores"], tgt["boxes"], tgt["labels"], iou)
        for c in set(tgt["labels"].tolist()) | set(out["labels"].tolist()):
            s, t, g = per_class.setdefault(c, ([], [], 0))
            sel = out["labels"] == c
            s.append(out["scores"][sel])
            t.append(tp_all[sel])
            per_class[c] = (s, t, g + int((tgt["labels"] == c).sum()))
    aps = [_average_precision(torch.cat(s), torch.cat(t), g) for s, t, g in per_class.values() if g > 0]
    return {
        "precision": n_tp / n_det if n_det else 1.0,
        "recall": n_tp / n_gt if n_gt else 1.0,
        "mAP": sum(aps) / len(aps) if aps else float("nan"),
        "detections": float(n_det),
        "objects": float(n_gt),
    }
