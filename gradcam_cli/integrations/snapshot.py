"""A fixed set of images explained with the model as it is mid-training, the model and the random state left as found.

Shared by `log_cams` and the Lightning callback, so both show the same pictures. Training after a call must go on
exactly as without it: the random states (torch, CUDA, numpy, Python), every `.grad`, every module's mode,
`requires_grad` and autocast are restored, and the maps are computed in eval mode, so BatchNorm's statistics and
dropout are untouched.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch import nn

from gradcam_cli.api import ReadyModel, cam_batch
from gradcam_cli.api_arguments import LayerSpec, as_resolved, photo_of
from gradcam_cli.errors import GradcamError, UsageError
from gradcam_cli.integrations.shown import Shown
from gradcam_cli.integrations.grid_shown import checked_methods, grid_of, layer_label, layer_list
from gradcam_cli.model.data_config import IMAGENET_MEAN, IMAGENET_STD
from gradcam_cli.model.outputs import scores_view
from gradcam_cli.model.state import eval_mode
from gradcam_cli.option_table import DEFAULT_MAX_PIXELS
from gradcam_cli.outputs.picture import draw
from gradcam_cli.vocab import Colormap

Images = str | os.PathLike | Image.Image | Sequence[str | os.PathLike | Image.Image] | torch.Tensor


@dataclass(frozen=True)
class ImageSet:
    """The images as the model takes them, (N, 3, H, W) normalised, and as the pictures under the maps (N, H, W, 3)."""

    names: list[str]
    x: torch.Tensor
    photos: np.ndarray


def module_of(model: nn.Module | ReadyModel) -> nn.Module:
    """The torch module: a LightningModule or any nn.Module as given, or what load_model() returned."""
    if isinstance(model, ReadyModel):
        return model.model
    if not isinstance(model, nn.Module):
        raise UsageError(f"model must be a torch.nn.Module or what gradcam_cli.load_model() returned, not {type(model).__name__}")
    return model


def image_set(
    images: Images,
    model: nn.Module | ReadyModel,
    *,
    size: int | tuple[int, int] | None = None,
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
) -> ImageSet:
    """Decoded once (a missing or broken file fails here), normalised with `mean`/`std`: given, else the data
    config of a load_model() model, else ImageNet's. A tensor batch is taken as normalised and shown de-normalised."""
    config = model.data_config if isinstance(model, ReadyModel) else None
    m = torch.tensor(mean or (config.mean if config else IMAGENET_MEAN), dtype=torch.float32).view(1, 3, 1, 1)
    s = torch.tensor(std or (config.std if config else IMAGENET_STD), dtype=torch.float32).view(1, 3, 1, 1)
    if isinstance(images, torch.Tensor):
        if images.dim() != 4 or images.shape[1] != 3:
            raise UsageError(f"images as a tensor must be a normalised batch (N, 3, H, W), not {tuple(images.shape)}")
        x = images.detach().to("cpu", torch.float32).clone()
        photos = ((x * s + m).clamp(0, 1) * 255).round().to(torch.uint8).permute(0, 2, 3, 1).numpy()
        return ImageSet([str(i) for i in range(len(x))], x, photos)
    items = [images] if isinstance(images, (str, os.PathLike, Image.Image)) else list(images)
    if not items:
        raise UsageError("images is empty: give image paths, PIL images or a tensor batch (N, 3, H, W)")
    decoded = [photo_of(item, DEFAULT_MAX_PIXELS)[0] for item in items]
    hw = _size(size, config.input_hw if config else decoded[0].shape[:2])
    photos = np.stack([np.asarray(Image.fromarray(p).resize((hw[1], hw[0]), Image.Resampling.BILINEAR)) for p in decoded])
    x = (torch.from_numpy(photos).permute(0, 3, 1, 2).float() / 255 - m) / s
    return ImageSet(_names(items), x, photos)


def _size(size: int | tuple[int, int] | None, default: Sequence[int]) -> tuple[int, int]:
    if size is None:
        return int(default[0]), int(default[1])
    return (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))


def _names(items: Sequence[Any]) -> list[str]:
    """A file's stem (its index too when two share one), else the image's index."""
    names: list[str] = []
    for i, item in enumerate(items):
        name = Path(item).stem if isinstance(item, (str, os.PathLike)) else str(i)
        names.append(f"{name}-{i}" if name in names else name)
    return names


def check_layers(model: nn.Module, layers: LayerSpec | Sequence[LayerSpec] | None) -> None:
    """Each layer resolved on the model now, so a bad path fails before training, not at the first map."""
    for layer in [] if layers is None else [layers] if isinstance(layers, (str, nn.Module)) else layers:
        as_resolved(model, layer)


@contextmanager
def kept_random_states() -> Iterator[None]:
    """torch's (CPU and CUDA), numpy's and Python's random states as they were, after whatever ran inside."""
    states = (torch.get_rng_state(), np.random.get_state(), random.getstate())
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    try:
        yield
    finally:
        torch.set_rng_state(states[0])
        np.random.set_state(states[1])
        random.setstate(states[2])
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)


@contextmanager
def left_as_found(model: nn.Module) -> Iterator[None]:
    """Inside: eval mode, autocast off, inference mode off; after: the random states, grads, modes and flags as found."""
    grads = [(p, p.grad, p.requires_grad) for p in model.parameters()]
    try:
        with ExitStack() as stack:
            stack.enter_context(kept_random_states())
            stack.enter_context(eval_mode(model))
            stack.enter_context(torch.inference_mode(False))  # Lightning validates under inference_mode
            for kind in ("cpu", "cuda") if torch.cuda.is_available() else ("cpu",):
                stack.enter_context(torch.autocast(kind, enabled=False))  # float32 maps under a mixed-precision trainer
            yield
    finally:
        for p, grad, flag in grads:
            p.grad = grad
            p.requires_grad_(flag)


def explain_set(
    model: nn.Module | ReadyModel,
    images: ImageSet,
    *,
    method: str = "gradcam",
    layers: LayerSpec | Sequence[LayerSpec] | None = None,
    classes: int | Sequence[int] | None = None,
    class_names: Sequence[str] | None = None,
    colormap: str = "jet",
    alpha: float = 0.5,
) -> list[Shown]:
    """Each image's map for its class (the top one, or `classes`: one for all or one per image), drawn on it."""
    module = module_of(model)
    names = class_names or (model.class_names if isinstance(model, ReadyModel) else getattr(module, "class_names", None))
    parameter = next(iter(module.parameters()), None)
    with left_as_found(module):
        x = images.x.clone()
        if parameter is not None:
            x = x.to(parameter.device, parameter.dtype if parameter.dtype.is_floating_point else torch.float32)
        # a forward returning a dict or a ModelOutput: its `logits` (model/outputs.py's rule), as `gradcam explain` reads them
        batch = cam_batch(scores_view(module), x, layers, method, classes).to_cpu()
    probabilities = batch.logits.float().softmax(-1)
    label = " + ".join(layer_label(module, layer) for layer in layer_list(layers))  # several: one map of them combined
    shown = []
    for i, image in enumerate(images.names):
        for k in batch.ranks(i):
            index = int(batch.targets[i, k])
            heat = draw(images.photos[i], batch.maps[i, k].float().numpy(), colormap=Colormap(colormap), alpha=alpha)
            name = str(names[index]) if names is not None and index < len(names) else str(index)
            shown.append(Shown(image, index, name, float(probabilities[i, index]), Image.fromarray(heat), method, label))
    return shown


class CamCallbackError(UsageError):
    """A callback's images or layers are wrong: raised when training begins, before its first step."""


class Watched:
    """What a training callback explains each time: its images and layers, checked once on the model, and how it draws.

    One piece for the Lightning and Hugging Face callbacks, so both check, explain and fail alike. `images` as a
    whole number N waits for the callback to `take` the first N images of the validation loader.
    """

    def __init__(
        self, images: Images | int, layers: LayerSpec | Sequence[LayerSpec] | None, tag: str, preprocessing: dict[str, Any],
        options: dict[str, Any],
    ) -> None:  # fmt: skip
        options = dict(options)
        try:
            self.methods = checked_methods(options.pop("method", "gradcam"))
        except GradcamError as error:
            raise CamCallbackError(f"CamCallback: {error}") from None
        if isinstance(images, int) and (isinstance(images, bool) or images < 1):
            what = "a whole number of at least 1 (the first N validation images), paths or a tensor"
            raise CamCallbackError(f"CamCallback: images={images!r}: give {what}")
        self.images, self.layers, self.tag = images, layers, tag
        self.preprocessing, self.options = preprocessing, options  # image_set's; explain_set's, less the method
        self.image_set: ImageSet | None = None

    @property
    def count(self) -> int | None:
        """N when the images are the validation loader's first N, else None."""
        return self.images if isinstance(self.images, int) else None

    def check(self, model: nn.Module) -> None:
        """The images decoded and the layers resolved on `model` now: a bad one is one line, before training."""
        try:
            if self.count is None:
                self.image_set = image_set(self.images, model, **self.preprocessing)  # type: ignore[arg-type]
            check_layers(model, self.layers)
        except GradcamError as error:
            raise CamCallbackError(f"CamCallback: {error}") from None

    def take(self, x: torch.Tensor, model: nn.Module) -> None:
        """The validation images (N, 3, H, W), normalised, as the set from now on, named `val0`, `val1`, ..."""
        try:
            taken = image_set(x, model, mean=self.preprocessing["mean"], std=self.preprocessing["std"])
        except GradcamError as error:
            raise CamCallbackError(f"CamCallback: the validation loader's images: {error}") from None
        self.image_set = replace(taken, names=[f"val{i}" for i in range(len(taken.names))])

    def explain(self, model: nn.Module) -> list[Shown]:
        """The images' maps with `model` as it is now (checked first, if no check has run yet)."""
        if self.image_set is None:
            self.check(model)
        assert self.image_set is not None, "images=N: the callback takes the validation images first"
        return explained(model, self.image_set, self.methods, self.layers, self.options)


def explained(
    model: nn.Module | ReadyModel, images: ImageSet, methods: Sequence[str], layers: LayerSpec | Sequence[LayerSpec] | None,
    options: dict[str, Any],
) -> list[Shown]:  # fmt: skip
    """explain_set for one method and layer; for several, one grid per image and class (rows the methods, columns the
    layers), each cell what that method and layer alone give. `options`: explain_set's, less method and layers."""
    columns = layer_list(layers)
    if len(methods) * len(columns) == 1:
        return explain_set(model, images, method=methods[0], layers=layers, **options)
    runs = [explain_set(model, images, method=m, layers=layer, **options) for m in methods for layer in columns]
    labels = [layer_label(module_of(model), layer) for layer in columns]
    photos = dict(zip(images.names, images.photos))
    colormap = options.get("colormap", "jet")
    return [grid_of([run[k] for run in runs], photos[runs[0][k].image], methods, labels, colormap) for k in range(len(runs[0]))]


def checked_every(value: object, name: str) -> int:
    """A callback's `every_n_...`: a whole number of at least 1, else one line naming it."""
    if not isinstance(value, int) or value < 1:
        raise CamCallbackError(f"CamCallback: {name} must be a whole number of at least 1, not {value!r}")
    return value
