"""What the Python API takes: each argument checked and turned into what the engine takes, or an error that says what
is accepted (a raw TypeError or AttributeError from deep inside would not say it).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeGuard, Union

import numpy as np
import torch
from torch import nn

from gradcam_cli.cams.targets import TargetChoice
from gradcam_cli.errors import InputError, LayerError, UsageError, one_line
from gradcam_cli.inputs.decode import _pil_to_rgb, load_image
from gradcam_cli.layers.paths import ResolvedLayer, resolve_layer
from gradcam_cli.values import parse_grid

LayerSpec = Union[str, "nn.Module"]


def pixels(array: np.ndarray, what: str) -> np.ndarray:
    if array.ndim != 3 or array.shape[2] != 3 or array.dtype != np.uint8:
        shape = "x".join(map(str, array.shape)) or "a scalar"
        raise InputError(
            f"{what} is {shape} {array.dtype}, not RGB pixels (height x width x 3, uint8)",
            hint="convert it: np.asarray(pil_image.convert('RGB')), or (rgb * 255).round().astype(np.uint8)",
        )
    if array.shape[0] < 1 or array.shape[1] < 1:
        raise InputError(f"{what} has no pixels")
    return np.ascontiguousarray(array)


def photo_of(image: Any, max_pixels: int) -> tuple[np.ndarray, str]:
    """The image as the CLI decodes a file (upright 8-bit RGB), and how its record names it."""
    from PIL import Image, ImageOps

    if isinstance(image, (str, os.PathLike)):
        return load_image(Path(image), max_pixels), str(Path(image))
    if isinstance(image, Image.Image):
        try:
            upright = ImageOps.exif_transpose(image)  # as load_image turns a file upright
            return pixels(_pil_to_rgb(upright if upright is not None else image), "the PIL image"), "<PIL image>"
        except (OSError, ValueError) as error:
            raise InputError(f"the PIL image cannot be decoded ({str(error).strip() or type(error).__name__})") from None
    if isinstance(image, np.ndarray):
        return pixels(image, "the image array"), "<array>"
    raise InputError(
        f"explain() takes an image file's path, a PIL image or an RGB uint8 array, not {type(image).__name__}",
        hint="for a batch of tensors, call gradcam_cli.cam(model.model, x)",
    )


def is_index(value: object) -> TypeGuard[int | np.integer[Any]]:
    """An integer class index: Python's or numpy's, not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def class_list(classes: object, names: bool) -> list[Any]:
    """`classes` as a list (one index, or name with `names`, or a sequence of them); anything else refused, saying what is taken."""
    taken = (str,) if names else ()
    given = [classes] if is_index(classes) or isinstance(classes, taken) else classes
    if isinstance(given, (Sequence, np.ndarray, torch.Tensor)) and not isinstance(given, (str, bytes)):
        items = given.tolist() if isinstance(given, (np.ndarray, torch.Tensor)) else list(given)
        if items and all(is_index(c) or isinstance(c, taken) for c in items):
            return items
    what = (
        "None (the top class), a class index (int) or name (str), or a list of them"
        if names
        else "None (each image's top class), an int for every image, or a list of one int per image"
    )
    raise UsageError(f"classes={one_line(repr(classes), 40)} ({type(classes).__name__}) is not what classes takes: give {what}")


def as_resolved(model: nn.Module, layer: LayerSpec) -> ResolvedLayer:
    if isinstance(layer, str):
        return resolve_layer(model, layer, type(model).__name__)
    for name, module in model.named_modules():
        if module is layer:
            return ResolvedLayer(path=name, name=name, module=module)
    raise LayerError("a layer module passed to cam() is not part of the model", hint="pass one of model.modules()")


def as_choice(classes: int | Sequence[int] | None) -> TargetChoice:
    if classes is None:
        return TargetChoice()
    if is_index(classes):
        return TargetChoice(classes=(int(classes),))
    per_image = tuple(int(c) for c in class_list(classes, names=False))
    return TargetChoice(classes=per_image, per_image=True)  # one per image: the engine checks the count


def checked_model(model: object) -> None:
    if not isinstance(model, nn.Module):
        raise UsageError(
            f"cam() takes a torch.nn.Module as model, not {type(model).__name__}",
            hint="for a model name or an image file, call gradcam_cli.explain(image, name)",
        )


def checked_call(x: object, method: object, grid: object) -> tuple[int, int] | None:
    """cam()'s batch, method and grid of the types it takes (the grid as (rows, columns)), or a UsageError that says what it takes."""
    if not isinstance(x, torch.Tensor):
        raise UsageError(
            f"cam() takes x as a torch.Tensor (N, C, H, W), not {type(x).__name__}",
            hint="convert it: torch.from_numpy(array), or for an image file or array call gradcam_cli.explain()",
        )
    if x.dim() not in (4, 5):
        shape = "x".join(map(str, x.shape)) or "a scalar"
        raise UsageError(
            f"cam() takes x as a batch (N, C, H, W), or of clips or volumes (N, C, T, H, W); this tensor is {x.dim()}-D ({shape})",
            hint="one image (C, H, W) is a batch of one: x[None]" if x.dim() == 3 else None,
        )
    if not x.is_floating_point():
        raise UsageError(
            f"cam() takes x as the model's floating-point input, not {x.dtype}", hint="preprocess it: x.float(), then normalise"
        )
    if not isinstance(method, str):
        raise UsageError(f"method must be a method's name (str) such as 'gradcam', not {type(method).__name__}")
    if isinstance(grid, str):
        return parse_grid(grid)
    if grid is not None and not (isinstance(grid, Sequence) and len(grid) == 2 and all(is_index(v) for v in grid)):
        raise UsageError(f"grid={one_line(repr(grid), 40)} is not (rows, columns) of the layer's tokens: give two ints or 'HxW'")
    return None if grid is None else (int(grid[0]), int(grid[1]))


def text_list(value: object, name: str, one: str, paths: bool = False) -> list[str] | None:
    """A list option (`prompts`, `references`) as the option table takes it: one text (or path) is a list of one; a
    list of them as it is; anything else refused, saying what is taken (a lone str is never read as its characters)."""
    if value is None:
        return None
    taken: tuple[type, ...] = (str, os.PathLike) if paths else (str,)
    items = [value] if isinstance(value, taken) else value
    if isinstance(items, Sequence) and not isinstance(items, (str, bytes)) and all(isinstance(v, taken) for v in items):
        return [os.fspath(v) for v in items]
    raise UsageError(f"{name}={one_line(repr(value), 40)} ({type(value).__name__}) is not what {name} takes: give {one}, or a list of them")
