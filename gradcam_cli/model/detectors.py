"""Object detectors: how a family of them is recognised, fed, read and where its heads look.

A detector's forward returns boxes, not class scores; each family returns them
its own way. A family here says, for the models it recognises: the input they
take (their own transform resizes and normalises, so ours only fits the photo
into the input: letterboxed, or stretched where the model stretches itself),
their class count and names, the checkpoint key that sizes their head, the
feature maps their heads read (the default layers), and how their output
reads as `Detections`: one per image, scores still in the graph, so each
detection's own score can be differentiated. torchvision's detectors are the
first family (any model built of their classes: the shipped example detector
too; Mask R-CNN's masks ride along with its boxes, found.Masks); transformers' DETRs (model/hf_detectors.py) and Ultralytics' YOLO
(model/yolo_detectors.py) follow behind the same protocol.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Protocol

import torch
from torch import nn

from gradcam_cli.errors import ModelError
from gradcam_cli.found import Detections, Masks
from gradcam_cli.model.data_config import DataConfig
from gradcam_cli.model.hf_detectors import HfDetectors
from gradcam_cli.model.sparse_roi_align import pooling_sparsely
from gradcam_cli.model.yolo_detectors import YoloDetectors

UNIT_MEAN, UNIT_STD = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)  # pixels in [0, 1]: the model normalises them itself
MASK_THRESHOLD = 0.5  # torchvision's documented threshold of Mask R-CNN's mask probabilities


class DetectorFamily(Protocol):
    """A family of detectors: what the loader, the layer defaults and the detection task ask of it."""

    name: str

    def accepts(self, model: nn.Module) -> bool:
        """Whether the model is one of this family's."""

    def read(self, output: Any, model_name: str, input_hw: tuple[int, int]) -> list[Detections]:
        """The forward's result as one Detections per image (an instance segmenter's with their masks, at the input's
        size); `input_hw` is the input's size, where a family whose boxes are relative to it (transformers') takes their
        pixels from."""

    def data_config(self, model: nn.Module) -> DataConfig:
        """The input the model takes: its size and how a photo is fitted into it."""

    def num_classes(self, model: nn.Module) -> int | None:
        """The classes its head scores (torchvision's two-stage and SSD heads count a background class)."""

    def head_key(self, model: nn.Module) -> str | None:
        """The state-dict key of the head's class weight, whose rows are classes (times anchors)."""

    def extra_rows(self, model: nn.Module) -> int:
        """Rows of that weight beyond classes times anchors, scoring no class (DETR's "no object"; mostly 0)."""

    def default_layers(self, model: nn.Module) -> list[str]:
        """The feature maps the detection heads read, one per pyramid level."""

    def every_candidate(self, model: nn.Module) -> contextlib.AbstractContextManager[object]:
        """While inside, the model's forward returns every candidate it scored (no score threshold, no suppression, no
        cap), each with its score for its class: where a missed object's best candidate is found (their masks, which
        no candidate needs, may be left out)."""

    def explaining(self, model: nn.Module) -> contextlib.AbstractContextManager[object]:
        """While its detections are explained: what makes each one's backward cheap (the same gradients), if anything."""


class TorchvisionDetectors:
    """torchvision.models.detection: Faster/Mask R-CNN, RetinaNet, FCOS, SSD and SSDlite, by name or built by the user."""

    name = "torchvision"
    CLASSES = ("GeneralizedRCNN", "RetinaNet", "FCOS", "SSD")

    def accepts(self, model: nn.Module) -> bool:
        return any(
            cls.__name__ in self.CLASSES and cls.__module__.startswith("torchvision.models.detection") for cls in type(model).__mro__
        )

    def read(self, output: Any, model_name: str, input_hw: tuple[int, int]) -> list[Detections]:
        """torchvision's eval-mode result: one dict of boxes, labels and scores per image (boxes already in pixels), and
        Mask R-CNN's `masks`, (K, 1, H, W) probabilities pasted at the input's size, each thresholded at 0.5 as
        torchvision's documentation does (made only for the kept detections, found.Masks)."""
        if not isinstance(output, (list, tuple)) or not all(
            isinstance(o, dict) and {"boxes", "scores", "labels"} <= o.keys() for o in output
        ):
            raise ModelError(f"{model_name} did not return torchvision's detections (a list of dicts of boxes, scores, labels)")
        return [Detections(o["boxes"], o["scores"], o["labels"], _thresholded(o.get("masks"))) for o in output]

    def data_config(self, model: nn.Module) -> DataConfig:
        """A square of the transform's short side, the photo letterboxed into it (its transform keeps that size);
        SSD's fixed size, stretched as its own transform stretches."""
        transform = getattr(model, "transform", None)
        fixed = getattr(transform, "fixed_size", None)
        if fixed:
            return DataConfig((int(fixed[0]), int(fixed[1])), UNIT_MEAN, UNIT_STD)
        sizes = getattr(transform, "min_size", None) or (800,)
        side = int(sizes[-1])
        return DataConfig((side, side), UNIT_MEAN, UNIT_STD, fit="letterbox")

    def num_classes(self, model: nn.Module) -> int | None:
        predictor = getattr(getattr(model, "roi_heads", None), "box_predictor", None)
        if predictor is not None and hasattr(predictor, "cls_score"):
            return int(predictor.cls_score.out_features)
        head = getattr(getattr(model, "head", None), "classification_head", None)
        count = getattr(head, "num_classes", None) or getattr(head, "num_columns", None)
        return int(count) if count else None

    def head_key(self, model: nn.Module) -> str | None:
        if getattr(getattr(model, "roi_heads", None), "box_predictor", None) is not None:
            return "roi_heads.box_predictor.cls_score.weight"
        names = [name for name, _ in model.named_parameters() if name.startswith("head.classification_head.")]
        first = [n for n in names if n.endswith("weight") and ("cls_logits" in n or ".module_list.0." in n)]
        return first[-1] if first else None

    def extra_rows(self, model: nn.Module) -> int:
        return 0  # the background class is one of the classes it counts

    def default_layers(self, model: nn.Module) -> list[str]:
        """Each output of the feature pyramid (its layer blocks, and P6/P7 where the model adds them); SSD's feature
        maps in the order its head reads them; else the backbone's output."""
        modules = dict(model.named_modules())
        fpn = next((name for name, module in modules.items() if type(module).__name__ == "FeaturePyramidNetwork"), None)
        if fpn is not None:
            blocks = [f"{fpn}.layer_blocks.{i}" for i in range(len(modules[f"{fpn}.layer_blocks"]))]
            extra = [f"{fpn}.extra_blocks.{p}" for p in ("p6", "p7") if f"{fpn}.extra_blocks.{p}" in modules]
            return blocks + extra
        backbone = modules.get("backbone")
        features, maps = getattr(backbone, "features", None), getattr(backbone, "extra", None)
        if isinstance(features, nn.Sequential) and isinstance(maps, nn.ModuleList):
            levels = ["backbone.features"]
            if type(backbone).__name__.startswith("SSDLite"):
                levels = [f"backbone.features.{i}" for i in range(len(features))]
            return levels + [f"backbone.extra.{i}" for i in range(len(maps))]
        return ["backbone"]

    # the postprocessing's knobs, on the model (RetinaNet, FCOS, SSD) or its roi_heads (R-CNN), and their open values
    OPEN = (("score_thresh", 0.0), ("nms_thresh", 1.0), ("detections_per_img", 1_000_000))

    def explaining(self, model: nn.Module) -> contextlib.AbstractContextManager[object]:
        """A two-stage detector pools its regions with a backward that visits only the regions with a gradient
        (model/sparse_roi_align.py): one detection's backward no longer walks every proposal."""
        return pooling_sparsely() if getattr(model, "roi_heads", None) is not None else contextlib.nullcontext()

    @contextlib.contextmanager
    def every_candidate(self, model: nn.Module) -> Iterator[None]:
        """The score threshold at 0, NMS at IoU 1 (nothing suppressed), no cap, and Mask R-CNN's mask branch off (it would
        paste a mask at the input's size for each of the tens of thousands of candidates, which need only their
        scores); restored on the way out."""
        owners = [owner for owner in (model, getattr(model, "roi_heads", None)) if owner is not None]
        saved = [(owner, name, getattr(owner, name)) for owner in owners for name, _ in self.OPEN if hasattr(owner, name)]
        opened = {**dict(self.OPEN), "mask_roi_pool": None}
        heads: Any = getattr(model, "roi_heads", None)
        if getattr(heads, "mask_roi_pool", None) is not None:
            saved.append((heads, "mask_roi_pool", heads.mask_roi_pool))  # RoIHeads.has_mask() is False without it
        try:
            for owner, name, _ in saved:
                setattr(owner, name, opened[name])
            yield
        finally:
            for owner, name, value in saved:
                setattr(owner, name, value)


def _thresholded(masks: Any) -> Masks | None:
    """Mask R-CNN's (K, 1, H, W) mask probabilities as masks made on demand: the pixels at 0.5 or more."""
    if not isinstance(masks, torch.Tensor) or masks.ndim != 4:
        return None
    soft = masks.detach()
    return Masks(lambda index: soft[index.to(soft.device), 0] >= MASK_THRESHOLD, torch.arange(int(soft.shape[0]), device=soft.device))


FAMILIES: tuple[DetectorFamily, ...] = (TorchvisionDetectors(), HfDetectors(), YoloDetectors())


def detector_family(model: nn.Module) -> DetectorFamily | None:
    """The family a detector belongs to; None for a model that is no detector any family knows."""
    return next((family for family in FAMILIES if family.accepts(model)), None)


def checkpoint_classes(family: DetectorFamily, model: nn.Module, state: dict[str, torch.Tensor]) -> int | None:
    """The class count a detector checkpoint's head was trained for: its class weight's rows (less those that score no
    class) over the anchors per location this model has (None where the checkpoint has no such weight or it does not fit)."""
    key, own_classes = family.head_key(model), family.num_classes(model)
    own = dict(model.named_parameters()).get(key) if key else None
    weight = state.get(key) if key else None
    if own is None or weight is None or not own_classes or tuple(weight.shape[1:]) != tuple(own.shape[1:]):
        return None
    extra = family.extra_rows(model)
    anchors = (int(own.shape[0]) - extra) // own_classes
    rows = int(weight.shape[0]) - extra
    return rows // anchors if anchors and rows % anchors == 0 else None
