"""transformers' object detectors (`hf:`): DETR, Conditional DETR, Deformable DETR and RT-DETR as a detector family.

Their forward returns, per query, class logits and a box (centre, size, in
[0, 1] of the input). Their image processor's `post_process_object_detection`
turns that into detections; `read` follows it as transformers implements it
(tests/test_hf_detectors.py checks scores and boxes against it), keeping each
score in the graph: DETR a softmax over the classes and its last "no object"
column, each query with its best class; the others a sigmoid, the k best of
queries x classes (Conditional and Deformable DETR: 100; RT-DETR: as many as
queries). A set prediction: no suppression. The architecture is known by the
transformers module its output class comes from; one without a rule here is
refused in one line when it is loaded.
"""

from __future__ import annotations

import contextlib
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from gradcam_cli.errors import ModelError
from gradcam_cli.model.data_config import IMAGENET_MEAN, IMAGENET_STD, DataConfig
from gradcam_cli.found import Detections
from gradcam_cli.model.hf_hub import detector_data_config
from gradcam_cli.model.state import eval_mode, switched_on

PROBE_HW = (128, 128)  # the forward that finds the feature maps: every level of a 32-stride backbone at least 4x4
DETR_SIDE = 800  # DETR's shortest edge, for a model saved without its image processor


@dataclass(frozen=True)
class Rule:
    """How an architecture's image processor scores its queries (its `post_process_object_detection`)."""

    softmax: bool  # softmax with a last "no object" column, each query's best class; else a sigmoid per class
    top_k: int | None = None  # the sigmoid's best of queries x classes kept; None: as many as queries


RULES = {  # transformers' module of each architecture → its processor's rule
    "detr": Rule(softmax=True),  # DetrImageProcessor
    "conditional_detr": Rule(softmax=False, top_k=100),  # ConditionalDetrImageProcessor, top_k=100
    "deformable_detr": Rule(softmax=False, top_k=100),  # DeformableDetrImageProcessor, top_k=100
    "rt_detr": Rule(softmax=False),  # RTDetrImageProcessor, use_focal_loss=True: top k = the queries
}

_EVERY: ContextVar[bool] = ContextVar("every_candidate", default=False)


def _architecture(obj: Any) -> str:
    """`detr` for transformers.models.detr.modeling_detr's classes (the model's and its output's)."""
    parts = type(obj).__module__.split(".")
    return parts[2] if len(parts) > 3 and parts[:2] == ["transformers", "models"] else ""


def _rule(obj: Any, model_name: str) -> Rule:
    rule = RULES.get(_architecture(obj))
    if rule is None:
        known = ", ".join(RULES)
        raise ModelError(f"{model_name}: transformers' {type(obj).__name__} is a detector whose output is not read yet (read: {known})")
    return rule


class HfDetectors:
    """transformers' models of the object-detection mapping (AutoModelForObjectDetection) whose output has a rule."""

    name = "transformers"

    def accepts(self, model: nn.Module) -> bool:
        """A transformers model whose class is in the object-detection mapping (transformers is imported only then)."""
        if not type(model).__module__.startswith("transformers.") or getattr(model, "config", None) is None:
            return False
        from transformers.models.auto.modeling_auto import MODEL_FOR_OBJECT_DETECTION_MAPPING_NAMES

        return type(model).__name__ in MODEL_FOR_OBJECT_DETECTION_MAPPING_NAMES.values()

    def read(self, output: Any, model_name: str, input_hw: tuple[int, int]) -> list[Detections]:
        """The processor's rule on `logits` and `pred_boxes`: scores in the graph, boxes x1, y1, x2, y2 in the input's
        pixels (`center_to_corners_format` times its width and height, as `target_sizes` scales them). Inside
        `every_candidate`: every query with each class's score (queries x classes, the query's box each time)."""
        logits, boxes = _parts(output, model_name)
        rule = _rule(output, model_name)
        height, width = input_hw
        if height <= 0 or width <= 0:
            raise ModelError(f"{model_name}: its boxes are relative to the input, whose size was not given")
        cx, cy, w, h = boxes.unbind(-1)
        corners = torch.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], dim=-1) * boxes.new_tensor([width, height] * 2)
        probs = logits.softmax(-1)[..., :-1] if rule.softmax else logits.sigmoid()
        queries, classes = probs.shape[1], probs.shape[2]
        if _EVERY.get():
            labels = torch.arange(queries * classes, device=probs.device) % classes
            return [Detections(c.repeat_interleave(classes, 0), p.flatten(), labels) for c, p in zip(corners, probs)]
        if rule.softmax:
            scores, labels = probs.max(-1)
            return [Detections(c, s, lab) for c, s, lab in zip(corners, scores, labels)]
        scores, index = probs.flatten(1).topk(min(rule.top_k or queries, queries * classes), dim=1)
        labels, query = index % classes, torch.div(index, classes, rounding_mode="floor")
        return [Detections(c[q], s, lab) for c, q, s, lab in zip(corners, query, scores, labels)]

    def data_config(self, model: nn.Module) -> DataConfig:
        """Its image processor's input (model/hf_hub.py: DETR's shortest edge as a letterboxed square, RT-DETR's fixed
        size stretched), found where the model was loaded from; without one DETR's 800 square and ImageNet's statistics."""
        _rule(model, "⟨model⟩")
        found = detector_data_config(str(getattr(model, "name_or_path", "") or ""))
        return found or DataConfig((DETR_SIDE, DETR_SIDE), IMAGENET_MEAN, IMAGENET_STD, fit="letterbox")

    def num_classes(self, model: nn.Module) -> int:
        """The config's labels (`id2label`'s ids; DETR's "N/A" ids among them: an index is its label id)."""
        config: Any = getattr(model, "config", None)
        return int(config.num_labels)

    def head_key(self, model: nn.Module) -> str | None:
        """The last class head's weight: `class_labels_classifier.weight` (DETR, Conditional DETR), `class_embed.N.weight`
        (Deformable DETR, RT-DETR: one per decoder layer, the last one's scores are the output's; a tied one's first)."""
        rows = self.num_classes(model) + self.extra_rows(model)
        own = dict(model.named_parameters())  # a tied copy's key is its first holder's
        linear = [(name, module) for name, module in model.named_modules() if isinstance(module, nn.Linear)]
        heads = [f"{name}.weight" for name, module in linear if module.out_features == rows and "class" in name and f"{name}.weight" in own]
        return heads[-1] if heads else None

    def extra_rows(self, model: nn.Module) -> int:
        """DETR's "no object" class: its head has a row more than the labels."""
        return 1 if RULES.get(_architecture(model), Rule(softmax=False)).softmax else 0

    def default_layers(self, model: nn.Module) -> list[str]:
        """The backbone's feature maps the transformer reads, one per level: each outermost module of the backbone
        whose output a module outside it takes in (DETR's and Conditional DETR's last stage, which `input_projection`
        reads; Deformable DETR's and RT-DETR's stages, one per level), seen in one forward of a blank 128x128 image."""
        names = [name for name, _ in model.named_modules()]
        backbone = next((name for name in names if name.rsplit(".", 1)[-1] == "backbone"), None)
        read = _features_read(model, backbone) if backbone is not None else []
        if not read:
            name = type(model).__name__
            raise ModelError(f"⟨model⟩: {name} has no backbone whose feature maps its transformer reads; name them with ⟨layers⟩")
        return read

    def explaining(self, model: nn.Module) -> contextlib.AbstractContextManager[object]:
        return contextlib.nullcontext()  # its backward has nothing to skip

    def every_candidate(self, model: nn.Module) -> contextlib.AbstractContextManager[object]:
        """`read` gives every query with each class's score (no top k, no best class): queries x classes candidates."""
        return switched_on(_EVERY)


def _parts(output: Any, model_name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The output's class logits (N, queries, classes) and boxes (N, queries, 4)."""
    logits, boxes = getattr(output, "logits", None), getattr(output, "pred_boxes", None)
    if not isinstance(logits, torch.Tensor) or not isinstance(boxes, torch.Tensor) or logits.dim() != 3 or boxes.dim() != 3:
        raise ModelError(f"{model_name} did not return a transformers detector's output (logits and pred_boxes per query)")
    if boxes.shape[-1] != 4 or logits.shape[:2] != boxes.shape[:2]:
        raise ModelError(f"{model_name} returned logits {tuple(logits.shape)} and pred_boxes {tuple(boxes.shape)}: not one box per query")
    return logits, boxes


def _features_read(model: nn.Module, backbone: str) -> list[str]:
    """The backbone modules (outermost) whose output tensor a module outside the backbone takes in, in the order taken."""
    made: dict[int, tuple[str, torch.Tensor]] = {}  # the tensors are held, so no id is reused during the forward
    taken: list[str] = []

    def produced(name: str) -> Any:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            if isinstance(output, torch.Tensor):
                made[id(output)] = (name, output)  # an enclosing module returning the same tensor ends later: it wins

        return hook

    def consumed(module: nn.Module, args: Any, kwargs: Any) -> None:
        for value in (*args, *kwargs.values()):
            name = made.get(id(value), ("", None))[0] if isinstance(value, torch.Tensor) else ""
            if name and name not in taken:
                taken.append(name)

    handles = [
        module.register_forward_hook(produced(name)) if name == backbone or name.startswith(f"{backbone}.")
        else module.register_forward_pre_hook(consumed, with_kwargs=True)
        for name, module in model.named_modules() if name
    ]  # fmt: skip
    parameter = next(iter(model.parameters()), None)
    blank = torch.zeros(1, 3, *PROBE_HW, device=parameter.device if parameter is not None else "cpu")
    try:
        with eval_mode(model), torch.no_grad():
            model(blank.to(parameter.dtype) if parameter is not None else blank)
    finally:
        for handle in handles:
            handle.remove()
    return taken
