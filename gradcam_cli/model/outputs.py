"""Whatever a model's forward returns, the class scores in it: one documented rule, or the user's ⟨output⟩.

Models return a tensor, a tuple `(logits, aux)`, a dict `{"out": ..., "aux": ...}`
or a transformers `ModelOutput`; the peers' trackers are full of "'tuple' object
has no attribute" for it. The rule: an attribute or key `logits`, then `out`,
then a pooled embedding, `image_embeds` then `pooler_output` (a base model
without a head, transformers' `Dinov2Model`: its (N, D) embedding, not its
(N, L, D) `last_hidden_state`, the first tensor it returns), then the first
tensor (of a tuple or list in order, of a dict's values in order); ⟨output⟩
names the key, attribute or index instead. The model is then seen through a
view that returns those scores: the same module (the same submodules,
parameters and dotted paths, hooks on them see the same calls), only its
forward's result picked, so nothing downstream has to know.
"""

from __future__ import annotations

import copy
import types
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from gradcam_cli.errors import GradcamError, ModelError, one_line
from gradcam_cli.model.faults import fault_line

PREFERRED_KEYS = ("logits", "out", "image_embeds", "pooler_output")


def _fields(output: Any) -> list[tuple[str, Any]]:
    """The named parts of an output: a dict's items, a ModelOutput's or a namedtuple's fields."""
    if isinstance(output, Mapping):
        return [(str(k), v) for k, v in output.items()]
    if hasattr(output, "_fields"):  # a namedtuple
        return [(name, getattr(output, name)) for name in output._fields]
    return []


def _described(output: Any) -> str:
    named = _fields(output)
    if named:
        return f"a {type(output).__name__} (keys: {', '.join(k for k, _ in named[:8])})"
    if isinstance(output, Sequence) and not isinstance(output, str):
        kinds = ", ".join(type(v).__name__ for v in list(output)[:6])
        return f"a {type(output).__name__} of {len(output)} ({kinds})"
    return f"a {type(output).__name__}"


def pick_scores(output: Any, choice: str | None = None) -> tuple[torch.Tensor, str | None]:
    """The class scores in a forward's output and where they were found (None: the output is the tensor)."""
    if choice is not None:
        return _chosen(output, choice), choice
    if isinstance(output, torch.Tensor):
        return output, None
    named = dict(_fields(output))
    for key in PREFERRED_KEYS:
        value = named.get(key, getattr(output, key, None) if not isinstance(output, Mapping) else None)
        if isinstance(value, torch.Tensor):
            return value, key
    ordered: list[tuple[str, Any]] = list(named.items())
    if not named and isinstance(output, (tuple, list)):
        ordered = [(str(index), value) for index, value in enumerate(output)]
    for key, value in ordered:
        if isinstance(value, torch.Tensor):
            return value, key
    raise ModelError(
        f"the model's forward returned {_described(output)}: no tensor of class scores in it",
        hint="name the part that holds them with ⟨output=KEY⟩ or ⟨output=INDEX⟩",
    )


def _chosen(output: Any, choice: str) -> torch.Tensor:
    """The part ⟨output⟩ names: an index of a tuple or list, else a key or attribute."""
    value: Any = None
    if isinstance(output, (tuple, list)) and choice.lstrip("-").isdigit():
        index = int(choice)
        value = output[index] if -len(output) <= index < len(output) else None
    elif isinstance(output, Mapping):
        value = output.get(choice)
    else:
        value = getattr(output, choice, None)
    if not isinstance(value, torch.Tensor):
        raise ModelError(
            f"⟨output={choice}⟩: the model's forward returned {_described(output)}, and {one_line(choice)!r} is no tensor in it",
            hint="give a key, attribute or index that holds the class scores (N, classes)",
        )
    return value


def scores_view(model: nn.Module, choice: str | None = None) -> nn.Module:
    """The model, seen as returning its class scores: a shallow copy sharing every submodule, its forward's result picked.

    A model whose forward already returns a tensor and no ⟨output⟩ is asked for is returned as it is.
    """
    if choice is None and not getattr(model, "_gradcam_view", False) and _returns_tensor(model):
        return model
    view = copy.copy(model)  # the same _modules, _parameters and _buffers dicts: the same network
    view.__dict__.update(_gradcam_view=True, _gradcam_forward=type(model).forward, _gradcam_choice=choice, output_key=None)
    # a bound method, not a closure: a deep copy of the view (the sanity check's) is bound to the copy, not to this view
    view.__dict__["forward"] = types.MethodType(_picked_forward, view)
    return view


def _picked_forward(self: nn.Module, *args: Any, **kwargs: Any) -> torch.Tensor:
    """The scores; one value per image (N,), as a regression or a binary head's `squeeze(1)` gives, as (N, 1)."""
    scores, key = pick_scores(self.__dict__["_gradcam_forward"](self, *args, **kwargs), self.__dict__["_gradcam_choice"])
    self.__dict__["output_key"] = key
    return scores[:, None] if scores.dim() == 1 else scores


MAP_FRACTION = 8  # a segmenter's scores: at least 1/8 of the input each way (transformers' SegFormer gives 1/4)


def is_score_map(shape: tuple[int, ...], input_size: tuple[int, ...]) -> bool:
    """Whether scores of this shape are a segmenter's, a score per class and pixel: (N, C, h, w) covering the image (a
    3-D model's (N, C, d, h, w) its (D, H, W) input) at 1/8 of the input's resolution or finer (a feature map of a few
    cells is no segmentation)."""
    sides = shape[2:]
    return len(shape) == 2 + len(input_size) and all(side * MAP_FRACTION >= size for side, size in zip(sides, input_size))


def _returns_tensor(model: nn.Module) -> bool:
    """timm's and torchvision's classifiers return their logits in eval mode; any other model gets the view
    (torchvision's segmenters return a dict)."""
    module = type(model).__module__
    return module.startswith(("timm.", "torchvision.models")) and not module.startswith("torchvision.models.segmentation")


def probed_output(view: nn.Module, input_size: tuple[int, ...]) -> tuple[str | None, tuple[int, ...] | None]:
    """One forward of a blank image (a clip model's: a blank clip, `input_size` (T, H, W)) through the view: the part
    of the output the scores came from, and their shape (None: not probed, timm's and torchvision's classifiers). A model
    whose output holds no scores, class scores (N, classes) or a segmenter's (N, C, H, W), or whose forward raises, fails
    here in one line, before any image is read."""
    if not getattr(view, "_gradcam_view", False):
        return None, None
    from gradcam_cli.model.blocks import input_channels_3d
    from gradcam_cli.model.state import eval_mode

    parameter = next(iter(view.parameters()), None)
    device = parameter.device if parameter is not None else torch.device("cpu")
    try:
        with eval_mode(view), torch.inference_mode():
            channels = input_channels_3d(view) if len(input_size) == 3 else 3  # a CT network's 1, a video ResNet's 3
            scores = view(torch.zeros(1, channels, *input_size, device=device))
    except GradcamError:
        raise
    except (Exception, SystemExit) as error:  # noqa: BLE001 - the user's forward may raise anything; one line naming their code
        what = "x".join(map(str, input_size)) + (" image" if len(input_size) == 2 else " clip (frames x height x width)")
        raise ModelError(
            f"⟨model⟩: its forward failed on a blank {what}: {fault_line(error)}",
            hint="fix the model's forward, or give the input size it takes with ⟨input_size⟩",
        ) from None
    if scores.dim() != 2 and not is_score_map(tuple(scores.shape), tuple(input_size)):
        key = view.__dict__.get("output_key")
        where = f"its {key!r}" if key is not None else "it"
        raise ModelError(
            f"the model's class scores must be (N, classes); {where} is {tuple(scores.shape)} (a segmenter's score maps, "
            f"(N, classes, H, W), a 3-D model's (N, classes, D, H, W), are at least 1/{MAP_FRACTION} of the input's size each way)",
            hint="name the part that holds them with ⟨output=KEY⟩ or ⟨output=INDEX⟩",
        )
    found = view.__dict__.get("output_key")
    return (None if found is None else str(found)), tuple(int(v) for v in scores.shape)


def view_output(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """What the loaded model (a view or not) returns for x, called on it or on a shallow copy of it (run/matching.py's
    similarity view, embedding the images through it)."""
    if model.__dict__.get("_gradcam_forward") is not None:
        return _picked_forward(model, x)
    return type(model).forward(model, x)
