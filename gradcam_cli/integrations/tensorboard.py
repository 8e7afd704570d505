"""`log_cams`: maps from any training loop to a TensorBoard SummaryWriter, at the step the caller names.

The writer is taken as it is (anything with `add_image`), so this module imports no tensorboard.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import nn

from gradcam_cli.api import ReadyModel
from gradcam_cli.api_arguments import LayerSpec
from gradcam_cli.integrations.sinks import to_writer
from gradcam_cli.integrations.grid_shown import checked_methods
from gradcam_cli.integrations.snapshot import Images, Shown, explained, image_set


def log_cams(
    model: nn.Module | ReadyModel,
    images: Images,
    writer: Any,
    step: int,
    *,
    method: str | Sequence[str] = "gradcam",
    layers: LayerSpec | Sequence[LayerSpec] | None = None,
    classes: int | Sequence[int] | None = None,
    tag: str = "gradcam",
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
    size: int | tuple[int, int] | None = None,
    class_names: Sequence[str] | None = None,
    colormap: str = "jet",
    alpha: float = 0.5,
) -> list[Shown]:
    """Explain `images` with the model as it is now and log each overlay as `TAG/IMAGE/CLASS` at `step` (HWC).

    `images`: paths, PIL images (resized to `size`, else a load_model() model's input size, else the first image's;
    normalised with `mean`/`std`, else its data config's, else ImageNet's), or a normalised tensor (N, 3, H, W),
    shown de-normalised with the same mean and std. Several methods (a list) or layers: one grid per image and class,
    rows the methods, columns the layers, each cell what that method and layer alone give. The model is left exactly
    as found (parameters, `.grad`, every module's mode, requires_grad, the random states, autocast), also when called
    under `torch.no_grad()`. Returns what was logged.
    """
    options = {"classes": classes, "class_names": class_names, "colormap": colormap, "alpha": alpha}
    shown = explained(model, image_set(images, model, size=size, mean=mean, std=std), checked_methods(method), layers, options)
    to_writer(writer, shown, tag, step)
    return shown
