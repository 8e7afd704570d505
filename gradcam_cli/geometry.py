"""Preprocessing with its geometry recorded, so every map can be put back exactly.

Two choices of what the model sees:
- whole (default): the whole image resized to the model's input size. The map
  then covers every pixel of the photo; nothing is silently cropped away.
- crop: the model's own eval transform (resize the short side to
  input/crop_pct, centre crop), as in training. The map covers the crop only;
  outside it the map is zero.
- letterbox (a detector's data config): the whole image scaled to fit, its
  aspect kept, the rest of the input the config's pad value (black, Ultralytics'
  grey 114); boxes and maps come back exactly.
Normalisation (mean, std) and interpolation always come from the model's data config.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

import torch
import torch.nn.functional as F

from gradcam_cli.model.data_config import PIL_RESAMPLE

if TYPE_CHECKING:
    from gradcam_cli.model.data_config import DataConfig


@dataclass(frozen=True)
class Geometry:
    """Where the model input lies in the original image.

    The input's (input_h, input_w) pixels show the original region `box` =
    (x0, y0, x1, y1), in original pixel units (edges, not centres).
    """

    original_hw: tuple[int, int]
    input_hw: tuple[int, int]
    resized_hw: tuple[int, int]
    crop_offset: tuple[int, int]  # (top, left) in the resized image
    box: tuple[float, float, float, float]


def plan_geometry(original_hw: tuple[int, int], config: DataConfig, crop: bool = False) -> Geometry:
    """The resize (and optional centre crop) for one image of this size."""
    height, width = original_hw
    in_h, in_w = config.input_hw
    if not crop and config.fit == "letterbox":
        return _letterbox(original_hw, (in_h, in_w))
    if not crop:
        return Geometry(original_hw, (in_h, in_w), (in_h, in_w), (0, 0), (0.0, 0.0, float(width), float(height)))
    pct = config.crop_pct or 1.0
    scale_h, scale_w = math.floor(in_h / pct), math.floor(in_w / pct)
    if config.crop_mode == "squash" or in_h != in_w:
        resized = (scale_h, scale_w)
    elif height <= width:  # torchvision's Resize(int): the short side, long side int-truncated
        resized = (scale_h, max(1, int(scale_h * width / height)))
    else:
        resized = (max(1, int(scale_w * height / width)), scale_w)
    top = int(round((resized[0] - in_h) / 2.0))
    left = int(round((resized[1] - in_w) / 2.0))
    sy, sx = height / resized[0], width / resized[1]
    box = (left * sx, top * sy, (left + in_w) * sx, (top + in_h) * sy)
    return Geometry(original_hw, (in_h, in_w), resized, (top, left), box)


def _letterbox(original_hw: tuple[int, int], input_hw: tuple[int, int]) -> Geometry:
    """The photo scaled to fit the input with its aspect kept, centred: the padding is a crop that overhangs it."""
    height, width = original_hw
    in_h, in_w = input_hw
    scale = min(in_h / height, in_w / width)
    resized = (max(1, min(in_h, round(height * scale))), max(1, min(in_w, round(width * scale))))
    top, left = -((in_h - resized[0]) // 2), -((in_w - resized[1]) // 2)
    sy, sx = height / resized[0], width / resized[1]
    return Geometry(original_hw, input_hw, resized, (top, left), (left * sx, top * sy, (left + in_w) * sx, (top + in_h) * sy))


def boxes_to_original(boxes: torch.Tensor, geometry: Geometry) -> torch.Tensor:
    """Boxes (K, 4) in the input's pixels → the photo's pixels, clipped to the photo."""
    scale = boxes.new_tensor(input_pixel(geometry) * 2)
    shift = boxes.new_tensor(geometry.box[:2] * 2)
    height, width = geometry.original_hw
    out = boxes.float() * scale + shift
    return torch.stack([out[:, 0].clamp(0, width), out[:, 1].clamp(0, height), out[:, 2].clamp(0, width), out[:, 3].clamp(0, height)], 1)


def boxes_to_input(boxes: torch.Tensor, geometry: Geometry) -> torch.Tensor:
    """Boxes (K, 4) in the photo's pixels → the input's pixels (the inverse of boxes_to_original, without clipping)."""
    return (boxes.float() - boxes.new_tensor(geometry.box[:2] * 2)) / boxes.new_tensor(input_pixel(geometry) * 2)


def input_pixel(geometry: Geometry) -> tuple[float, float]:
    """The width and height of one input pixel in the photo's pixels."""
    x0, y0, x1, y1 = geometry.box
    return (x1 - x0) / geometry.input_hw[1], (y1 - y0) / geometry.input_hw[0]


def to_input_array(image: np.ndarray, geometry: Geometry, config: DataConfig) -> np.ndarray:
    """RGB uint8 H×W×3 → float32 3×h×w, normalised with the model's mean and std."""
    from PIL import Image

    resample = PIL_RESAMPLE.get(config.interpolation, PIL_RESAMPLE["bilinear"])
    resized_h, resized_w = geometry.resized_hw
    pil = Image.fromarray(image)
    if pil.size != (resized_w, resized_h):
        pil = pil.resize((resized_w, resized_h), resample=resample)
    top, left = geometry.crop_offset
    in_h, in_w = geometry.input_hw
    array = np.asarray(pil, dtype=np.float32)
    array = _pad_to(array, top, left, in_h, in_w, config.pad)
    array = array / 255.0
    array = ((array - np.asarray(config.mean, dtype=np.float32)) / np.asarray(config.std, dtype=np.float32)).astype(np.float32)
    return np.ascontiguousarray(array.transpose(2, 0, 1))


def _pad_to(array: np.ndarray, top: int, left: int, height: int, width: int, pad: int = 0) -> np.ndarray:
    """Crop at (top, left); where the crop overhangs the image, pad with `pad` (zeros like CenterCrop, unless the model's
    letterbox has its own grey)."""
    out = np.full((height, width, array.shape[2]), pad, dtype=array.dtype)
    src_y0, src_x0 = max(top, 0), max(left, 0)
    src_y1, src_x1 = min(top + height, array.shape[0]), min(left + width, array.shape[1])
    out[src_y0 - top : src_y1 - top, src_x0 - left : src_x1 - left] = array[src_y0:src_y1, src_x0:src_x1]
    return out


def resize(t: torch.Tensor, size: tuple[int, ...]) -> torch.Tensor:
    """Any (..., h, w) tensor → (..., H, W), bilinear with half-pixel centres (as cv2.resize), dtype kept;
    with a 3-D size (T, H, W), a (..., t, h, w) tensor trilinearly, the same half-pixel rule along every axis.

    The one resize of maps and images in the package: layer maps to the input,
    augmented views and their maps, FullGrad's parts, maps back onto the photo, a clip's or a volume's maps.
    """
    dims = len(size)
    if tuple(t.shape[-dims:]) == tuple(size):
        return t
    planes = t.reshape(-1, 1, *t.shape[-dims:]).float()
    mode = "trilinear" if dims == 3 else "bilinear"
    out = F.interpolate(planes, size=tuple(size), mode=mode, align_corners=False)
    return out.reshape(*t.shape[:-dims], *size).to(t.dtype)


def map_to_original(cam: torch.Tensor, geometry: Geometry, clamp: bool = True) -> np.ndarray:
    """A map (h, w) or (C, h, w) at the input size → float32 at the original size (zero outside a crop).

    `clamp` keeps values in [0, 1]; raw maps (--norm none) are resized as they are.
    """
    height, width = geometry.original_hw
    cam = _inside_photo(cam, geometry)
    x0, y0, x1, y1 = geometry.box
    left, top = max(0, math.floor(x0)), max(0, math.floor(y0))
    right, bottom = min(width, math.ceil(x1)), min(height, math.ceil(y1))
    out = np.zeros((*cam.shape[:-2], height, width), dtype=np.float32)
    if right > left and bottom > top:
        region = resize(cam.float(), (bottom - top, right - left))
        out[..., top:bottom, left:right] = (region.clamp(0, 1) if clamp else region).cpu().numpy()
    return out


def _inside_photo(cam: torch.Tensor, geometry: Geometry) -> torch.Tensor:
    """A letterboxed input's map without its padding: the input pixels that show the photo (whole pixels, as placed)."""
    top, left = geometry.crop_offset
    if top >= 0 and left >= 0:
        return cam
    rows, cols = geometry.resized_hw
    y0, x0 = max(0, -top), max(0, -left)
    return cam[..., y0 : y0 + rows, x0 : x0 + cols]


def input_centres(geometry: Geometry) -> tuple[np.ndarray, np.ndarray]:
    """Where each input column's and row's centre lies in the photo's pixels (x, y)."""
    x0, y0, x1, y1 = geometry.box
    in_h, in_w = geometry.input_hw
    return x0 + (np.arange(in_w) + 0.5) * (x1 - x0) / in_w, y0 + (np.arange(in_h) + 0.5) * (y1 - y0) / in_h


def labels_to_input(values: np.ndarray, geometry: Geometry, fill: int) -> np.ndarray:
    """A per-pixel map of the photo (class labels, a mask) at each input pixel: the photo pixel under its centre (the
    nearest, so labels never blend); `fill` where the input shows no photo (a letterbox's padding)."""
    xs, ys = input_centres(geometry)
    return _sampled(values, np.floor(xs).astype(np.int64), np.floor(ys).astype(np.int64), fill)


def labels_to_original(values: np.ndarray, geometry: Geometry, fill: int) -> np.ndarray:
    """A per-pixel map of the input (a segmenter's labels, a region) on the photo: the input pixel under each photo
    pixel's centre (the nearest); `fill` where the input does not reach (outside a crop)."""
    height, width = geometry.original_hw
    x0, y0, x1, y1 = geometry.box
    in_h, in_w = geometry.input_hw
    cols = np.floor((np.arange(width) + 0.5 - x0) * in_w / (x1 - x0)).astype(np.int64)
    rows = np.floor((np.arange(height) + 0.5 - y0) * in_h / (y1 - y0)).astype(np.int64)
    return _sampled(values, cols, rows, fill)


def _sampled(values: np.ndarray, cols: np.ndarray, rows: np.ndarray, fill: int) -> np.ndarray:
    """values[rows, cols] on the grid they make, `fill` where a row or column falls outside."""
    height, width = values.shape[-2:]
    in_rows, in_cols = (rows >= 0) & (rows < height), (cols >= 0) & (cols < width)
    out = np.full((len(rows), len(cols)), fill, dtype=values.dtype)
    out[np.ix_(in_rows, in_cols)] = values[np.ix_(rows[in_rows], cols[in_cols])]
    return out
