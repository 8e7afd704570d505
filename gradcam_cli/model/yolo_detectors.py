"""Ultralytics' YOLO detectors (`yolo:`, model/ultralytics_hub.py) as a detector family: DetectionModels with a Detect
head, and instance segmenters with a Segment head.

The rule of their output, read in ultralytics 8.4's `ultralytics.nn.modules.head.Detect`
and checked on every model when it is loaded (a forward on a blank input):
in eval mode the forward returns a pair `(y, parts)`. `y` is (N, 4 + nc, A): for each
of the A anchors of all pyramid levels (8,400 at 640x640: 80², 40², 20²) its box,
centre x, centre y, width, height in the input's pixels, then its nc class scores,
sigmoids (no objectness). `parts` is the head's own: in 8.4 a dict whose "scores"
(N, nc, A) are the logits (under "one2many" where the head also has a one-to-one
branch), in 8.1-8.3 the per-level maps (N, 4 * reg_max + nc, h, w). A head with a
one-to-one branch (YOLOv10, YOLO26) is read as 8.4's predict reads it by default
(`nms` unset): its one-to-many branch, then NMS (the hub selects it when it loads).

Detections as Ultralytics' `non_max_suppression` makes them (multi_label off):
each anchor with its best class, at most 30,000 of the best anchors, class-wise
NMS at IoU 0.7 (predict's default), at most 300 kept, by falling score. No
confidence floor (predict's 0.25 and val's 0.001 would leave an untrained model
nothing): ⟨score_threshold⟩ filters afterwards, and as NMS is greedy by score a
box below a threshold never suppresses one above it, so what is kept above any
threshold is what Ultralytics keeps at that `conf`. Each score is `y[n, 4 + class,
anchor]`, indexed from the forward's own tensor: it stays in the graph.

A Segment head (YOLOv8-seg to YOLO26-seg) adds to each anchor its nm mask
coefficients, rows 4 + nc on of `y`, and the image's prototypes (N, nm, h, w):
in 8.4 its eval forward returns `((y, protos), parts)` (parts as Detect's, with
`mask_coefficient`), in 8.1-8.3 `(y, (levels, coefficients, protos))`. Its
detections are read as the Detect head's, the same NMS over the same rows
(Ultralytics' NMS carries the coefficients along as extra columns and leaves
them out of every choice), and each kept detection's mask is Ultralytics' own,
`ultralytics.utils.ops.process_mask` of the prototypes, the coefficients of its
anchor and its box at the input's size (`upsample=True`, as its predictor makes
them unless `retina_masks`): the mask's logits upsampled bilinearly, above 0,
cropped to the box. A detection whose mask is empty stays (its predictor drops
it), so a Segment head keeps what its Detect head would.
"""

from __future__ import annotations

import contextlib
import math
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from gradcam_cli.errors import ModelError
from gradcam_cli.model.data_config import DataConfig
from gradcam_cli.found import Detections, Masks
from gradcam_cli.model.libraries import import_torchvision
from gradcam_cli.model.state import switched_on

IOU = 0.7  # Ultralytics' `iou` default (cfg/default.yaml), what predict and val pass to non_max_suppression
MAX_NMS = 30_000  # non_max_suppression's max_nms: the best anchors that enter NMS
MAX_DET = 300  # its max_det: kept per image
PAD = 114  # Ultralytics' LetterBox pads with grey 114
DEFAULT_SIDE = 640  # Ultralytics' imgsz default, for a model built from a config (no training arguments)
HEADS = ("Detect", "v10Detect", "Segment", "Segment26")  # a detection head, an instance segmenter's; Pose, OBB, World and
# YOLOE heads add outputs of their own
PROTO_STRIDE = 4  # every Segment head's prototypes are a quarter of the input's size each way
UNIT_MEAN, UNIT_STD = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)  # pixels in [0, 1]: Ultralytics divides by 255 only

_EVERY: ContextVar[bool] = ContextVar("yolo_every_candidate", default=False)


def head_of(model: nn.Module) -> nn.Module | None:
    """The last layer of an Ultralytics model's `model` Sequential: its head."""
    layers = getattr(model, "model", None)
    return layers[-1] if isinstance(layers, nn.Sequential) and len(layers) else None


def is_ultralytics_model(model: nn.Module) -> bool:
    return any(cls.__name__ == "BaseModel" and cls.__module__.startswith("ultralytics.") for cls in type(model).__mro__)


class YoloDetectors:
    """Ultralytics' DetectionModel (YOLOv3u to YOLO26) with a plain Detect head or a Segment head, built from a config or
    a checkpoint."""

    name = "ultralytics"

    def accepts(self, model: nn.Module) -> bool:
        head = head_of(model)
        return is_ultralytics_model(model) and head is not None and type(head).__name__ in HEADS

    def read(self, output: Any, model_name: str, input_hw: tuple[int, int]) -> list[Detections]:
        """Each image's anchors after Ultralytics' NMS (a Segment head's with their masks), or every anchor inside
        `every_candidate` (no masks: a candidate needs only its score)."""
        head = predictions(output, model_name)
        if _EVERY.get():
            return [_every(rows) for rows in head.rows]
        found = [_suppressed(rows) for rows in head.rows]
        if head.coefficients is None or head.protos is None:
            return [detections for detections, _ in found]
        shape = input_hw if all(input_hw) else tuple(PROTO_STRIDE * side for side in head.protos.shape[-2:])
        return [
            Detections(d.boxes, d.scores, d.labels, _masks(protos, coefficients[:, kept], d.boxes, (int(shape[0]), int(shape[1]))))
            for (d, kept), coefficients, protos in zip(found, head.coefficients, head.protos)
        ]

    def data_config(self, model: nn.Module) -> DataConfig:
        """The size it was trained at (`args.imgsz`; 640 for a config), rounded up to its largest stride as
        Ultralytics' check_imgsz does; pixels in [0, 1]; the photo letterboxed, padded grey as Ultralytics pads."""
        args = getattr(model, "args", None)
        size = args.get("imgsz") if isinstance(args, dict) else getattr(args, "imgsz", None)
        sides = [size, size] if isinstance(size, int) else list(size or [])[:2]
        sides = [int(s) for s in sides] if len(sides) == 2 and all(isinstance(s, int) and s > 0 for s in sides) else [DEFAULT_SIDE] * 2
        stride = max(int(torch.as_tensor(getattr(model, "stride", 32)).max()), 32)
        height, width = (math.ceil(side / stride) * stride for side in sides)
        return DataConfig((height, width), UNIT_MEAN, UNIT_STD, fit="letterbox", pad=PAD)

    def num_classes(self, model: nn.Module) -> int | None:
        count = getattr(head_of(model), "nc", None)
        return int(count) if count else None

    def extra_rows(self, model: nn.Module) -> int:
        """Its class branch has one row per class, none for "no object" (scores are sigmoids, no background)."""
        return 0

    def head_key(self, model: nn.Module) -> str | None:
        """The class branch's last conv of the first level (`model.22.cv3.0.2.weight` in v8n): one row per class."""
        branch = getattr(head_of(model), "cv3", None)
        conv = branch[0][-1] if isinstance(branch, nn.ModuleList) and len(branch) and isinstance(branch[0], nn.Sequential) else None
        weight = getattr(conv, "weight", None)
        return next((name for name, p in model.named_parameters() if p is weight), None) if weight is not None else None

    def default_layers(self, model: nn.Module) -> list[str]:
        """The layers whose outputs the head reads, from its `f` (`model.15`, `model.18`, `model.21` in v8n)."""
        head: Any = head_of(model)
        index = int(getattr(head, "i", len(getattr(model, "model", ())) - 1))  # Ultralytics numbers its layers; `f` -1: the one before
        sources = [head.f] if isinstance(head.f, int) else list(head.f)
        return [f"model.{i if i >= 0 else index + i}" for i in sources]

    def explaining(self, model: nn.Module) -> contextlib.AbstractContextManager[object]:
        return contextlib.nullcontext()  # its backward has nothing to skip

    def every_candidate(self, model: nn.Module) -> contextlib.AbstractContextManager[object]:
        """`read` returns every anchor with its best class (no NMS, no cap) while inside; as it was on the way out."""
        return switched_on(_EVERY)


@dataclass(frozen=True)
class HeadOutput:
    """The head's eval output by the rule: boxes and class scores, and a Segment head's mask coefficients and prototypes."""

    rows: torch.Tensor  # (N, 4 + nc, A): each anchor's box (centre, size) and class scores, in the graph
    coefficients: torch.Tensor | None = None  # (N, nm, A) a Segment head's mask coefficients per anchor
    protos: torch.Tensor | None = None  # (N, nm, h, w) its prototypes


def predictions(output: Any, model_name: str) -> HeadOutput:
    """`y` of the rule, its anchors counted again in the head's parts, a Segment head's rows past the classes split off as
    its coefficients; else one line naming what came."""
    if isinstance(output, (tuple, list)) and len(output) == 2:
        y, parts, protos = _segment_parts(*output)
        nm = int(protos.shape[1]) if protos is not None else 0
        if isinstance(y, torch.Tensor) and y.ndim == 3 and y.is_floating_point() and y.shape[1] > 4 + nm:
            classes = int(y.shape[1]) - 4 - nm
            if _anchors(parts, classes) == y.shape[2] and (protos is None or protos.shape[0] == y.shape[0]):
                if protos is None:
                    return HeadOutput(y)
                return HeadOutput(y[:, : 4 + classes], y[:, 4 + classes :].detach(), protos.detach())
    raise ModelError(
        f"{model_name} did not return what Ultralytics' Detect head returns in eval mode, (N, 4 + classes, anchors) boxes "
        f"and scores beside the head's parts (a Segment head's with its mask coefficients and prototypes): it returned "
        f"{described(output)}"
    )


def _segment_parts(y: Any, parts: Any) -> tuple[Any, Any, torch.Tensor | None]:
    """A Segment head's output as a Detect head's `(y, parts)` and its prototypes (N, nm, h, w): 8.4's `((y, protos),
    parts)` or 8.1-8.3's `(y, (levels, coefficients, protos))`; a Detect head's as it is, no prototypes."""
    protos = None
    if isinstance(y, (tuple, list)) and len(y) == 2 and isinstance(y[1], torch.Tensor):
        y, protos = y
    elif isinstance(parts, (tuple, list)) and len(parts) == 3 and isinstance(parts[0], (tuple, list)):  # not 3 levels' maps
        parts, protos = parts[0], parts[2]
    return y, parts, protos if isinstance(protos, torch.Tensor) and protos.ndim == 4 else None


def _anchors(parts: Any, classes: int) -> int | None:
    """The anchors the head's parts count: 8.4's dict of logits (N, classes, A), or 8.1-8.3's list of level maps."""
    if isinstance(parts, dict):
        parts = parts.get("one2many", parts)
        scores = parts.get("scores") if isinstance(parts, dict) else None
        if isinstance(scores, torch.Tensor) and scores.ndim == 3 and scores.shape[1] == classes:
            return int(scores.shape[2])
        return None
    if isinstance(parts, (list, tuple)) and parts and all(isinstance(t, torch.Tensor) and t.ndim == 4 for t in parts):
        return sum(int(t.shape[2] * t.shape[3]) for t in parts)
    return None


def described(value: Any, depth: int = 0) -> str:
    """What a forward returned, in a few words: `a tuple of a (1, 300, 6) tensor, a dict of one2many, one2one`."""
    if isinstance(value, torch.Tensor):
        return f"a {tuple(value.shape)} tensor"
    if isinstance(value, dict):
        return f"a dict of {', '.join(map(str, list(value)[:4]))}" if value else "an empty dict"
    if isinstance(value, (tuple, list)) and depth == 0:
        return f"a {type(value).__name__} of {', '.join(described(v, 1) for v in value[:3])}{', ...' if len(value) > 3 else ''}"
    return f"a {type(value).__name__}"


def _xyxy(xywh: torch.Tensor) -> torch.Tensor:
    """Centre and size (A, 4) → corners, as Ultralytics' xywh2xyxy."""
    half = xywh[:, 2:] / 2
    return torch.cat([xywh[:, :2] - half, xywh[:, :2] + half], 1)


def _suppressed(rows: torch.Tensor) -> tuple[Detections, torch.Tensor]:
    """One image's (4 + nc, A) rows after Ultralytics' NMS: the kept anchors, each with its best class's score, and
    the kept anchors' indices (where a Segment head's coefficients are read)."""
    batched_nms = import_torchvision().ops.batched_nms  # torch's compiler deferred, as everywhere here

    boxes, classes = _xyxy(rows[:4].T), rows[4:]
    best, labels = classes.detach().max(0)
    entering = best.argsort(descending=True)[:MAX_NMS] if best.numel() > MAX_NMS else torch.arange(best.numel(), device=best.device)
    order = batched_nms(boxes.detach()[entering].float(), best[entering].float(), labels[entering], IOU)[:MAX_DET]
    kept = entering[order]
    return Detections(boxes[kept], classes[labels[kept], kept], labels[kept]), kept


def _masks(protos: torch.Tensor, coefficients: torch.Tensor, boxes: torch.Tensor, shape: tuple[int, int]) -> Masks:
    """The detections' masks as Ultralytics' predictor makes them (`process_mask`, upsampled to the input's size), made
    only for the detections asked for: `coefficients` (nm, K) and `boxes` (K, 4) in the input's pixels."""
    coefficients, boxes = coefficients.T, boxes.detach()

    def make(index: torch.Tensor) -> torch.Tensor:
        from ultralytics.utils.ops import process_mask

        index = index.to(coefficients.device)
        return process_mask(protos, coefficients[index].float(), boxes[index].float(), shape, upsample=True).bool()

    return Masks(make, torch.arange(int(boxes.shape[0]), device=boxes.device))


def _every(rows: torch.Tensor) -> Detections:
    """Every anchor, each with its best class's score."""
    boxes, classes = _xyxy(rows[:4].T), rows[4:]
    labels = classes.detach().argmax(0)
    anchors = torch.arange(classes.shape[1], device=classes.device)
    return Detections(boxes, classes[labels, anchors], labels)
