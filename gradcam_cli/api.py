"""The Python API: `cam()` on tensors; `load_model()` and `explain()` on images, for notebooks and scripts.

`explain()` runs an image through the pieces `gradcam explain` uses (decoding, geometry, the engine, the map put
back onto the photo, the overlay, the record), so its map is the `.npy` the CLI writes for that image. Failures
are the package's GradcamError subclasses; their messages name this API's arguments (the CLI spells the same
marks as its flags).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gradcam_cli.cams.engine import compute_cams, model_lock
from gradcam_cli.cams.methods import get_method
from gradcam_cli.errors import GradcamError, InputError, LayerError, Notice, UsageError
from gradcam_cli.geometry import Geometry, plan_geometry, to_input_array
from gradcam_cli.layers.defaults import clip_layer_paths, default_layer_paths
from gradcam_cli.maps import CamOptions
from gradcam_cli.vocab import Norm, TargetKind
from gradcam_cli.model.device import place_model, resolve_device
from gradcam_cli.model.load import LoadedModel
from gradcam_cli.model.load import load_model as load_loaded_model
from gradcam_cli.outputs.legend import display_scale
from gradcam_cli.outputs.picture import draw
from gradcam_cli.outputs.provenance import stamp_for
from gradcam_cli.outputs.render import guided_photo, photo_maps
from gradcam_cli.outputs.writer import caption_for, image_probabilities, image_record, target_record
from gradcam_cli.run.prepare import PreparedRun, prepare_run
from gradcam_cli.api_arguments import LayerSpec, as_choice, as_resolved, checked_call, checked_model, class_list, photo_of, text_list
from gradcam_cli.api_detections import detection_explanation
from gradcam_cli.api_segments import segment_explanation
from gradcam_cli.found import Segments
from gradcam_cli.api_results import ClassMap, Explanation
from gradcam_cli.settings import ExplainSettings, ModelSettings, build_settings
from gradcam_cli.option_table import DEFAULT_MAX_PIXELS
from gradcam_cli.values import checked_preprocessing

import torch
from torch import nn

if TYPE_CHECKING:
    from PIL import Image

    from gradcam_cli.maps import CamBatch


@dataclass(repr=False, kw_only=True)
class ReadyModel(LoadedModel):
    """What load_model() returns: a LoadedModel placed as a run holds it, with what its records name to reproduce it."""

    device: torch.device
    channels_last: bool
    pretrained: bool = True
    weights: Path | None = None
    labels: Path | None = None

    def __repr__(self) -> str:
        h, w = self.data_config.input_hw
        return f"ReadyModel({self.name!r}, {self.source.name}, device='{self.device}', classes={self.num_classes}, input={h}x{w})"


def load_model(
    name: str,
    weights: str | os.PathLike[str] | None = None,
    labels: str | os.PathLike[str] | None = None,
    pretrained: bool = True,
    device: str | torch.device = "auto",
    *,
    model_kwargs: Mapping[str, Any] | None = None,
    input_hw: tuple[int, int] | None = None,
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
    interpolation: str | None = None,
    crop_pct: float | None = None,
    ema: bool = False,
    output: str | None = None,
    trust_pickle: bool = False,
) -> ReadyModel:
    """The model as `gradcam explain --model NAME` builds it: eval mode, its own data config and class names, placed.

    `weights`: a local checkpoint (.safetensors, or a .pth/.pt state dict); `labels`: a text file of class names,
    one a line; `pretrained=False`: seeded random weights (offline; the maps mean nothing). `device`: auto (CUDA,
    then MPS, then CPU), cpu, cuda, cuda:N or mps. Load once, then explain() any number of images with it.
    `name` may also be your own code, `"path/to/net.py:build"` or `"package.module:build"` (it is imported and run),
    with `model_kwargs` for the builder. `input_hw`, `mean`, `std` (0-1 scale), `interpolation` and `crop_pct`
    override the preprocessing the model comes with (a model of your own comes with ImageNet's); `ema=True` loads the
    checkpoint's EMA weights; `output` the key, attribute or index of the forward's result with the class scores.
    `name` may be an Ultralytics YOLO detector or instance segmenter, `"yolo:yolov8n.yaml"` (random weights: `pretrained=False`) or
    `"yolo:path/to/best.pt"`, a pickle, loaded only with `trust_pickle=True`: loading it runs the code inside it.
    """
    preprocessing = checked_preprocessing(input_hw, mean, std, interpolation, crop_pct)
    if not isinstance(name, str) or not name.strip():
        raise UsageError(f"{name!r} is not a model name", hint="name a timm model ('resnet50'), 'hf-hub:ORG/NAME' or 'torchvision:ARCH'")
    placed_on = resolve_device(str(device))  # before the load, as a run does: a bad device costs no download
    weights_path, labels_path = (None if p is None else Path(p) for p in (weights, labels))
    loaded = load_loaded_model(
        name,
        pretrained=bool(pretrained),
        weights=weights_path,
        labels=labels_path,
        kwargs=model_kwargs,
        preprocessing=preprocessing,
        ema=bool(ema),
        output=None if output is None else str(output),
        trust_pickle=trust_pickle is True,
    )
    for notice in loaded.notices:
        warnings.warn(Notice(notice), stacklevel=2)  # spelled as this API's arguments, and as a command's flags there
    channels_last = place_model(loaded.model, placed_on)
    built = {f.name: getattr(loaded, f.name) for f in fields(LoadedModel)}
    return ReadyModel(
        **built, device=placed_on, channels_last=channels_last, pretrained=bool(pretrained), weights=weights_path, labels=labels_path
    )


def _ready(model: ReadyModel | str) -> ReadyModel:
    """explain()'s model, loaded if it is a name, on the device its weights are on now."""
    if isinstance(model, str):
        return load_model(model)
    if not isinstance(model, ReadyModel):
        raise UsageError(
            f"model must be what gradcam_cli.load_model() returned, or a model name such as 'resnet50'; not {type(model).__name__}",
            hint="for a torch module of your own, call gradcam_cli.cam(module, x)",
        )
    tensor = next(iter([*model.model.parameters(), *model.model.buffers()]), None)
    if tensor is None or (tensor.device.type == model.device.type and model.device.index in (None, tensor.device.index)):
        return model
    return replace(model, device=tensor.device)  # moved since it was loaded: its inputs follow it


def _read_only(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


def _settings(ready: ReadyModel, given: dict[str, Any]) -> ExplainSettings:
    """The options checked by the CLI's own option table (same defaults, same limits), with the model's settings."""
    classes, grid = given.pop("classes"), given.get("grid")
    if classes is not None:
        given["classes"] = [str(c) for c in class_list(classes, names=True)]
    given["prompts"] = text_list(given.get("prompts"), "prompts", "a text")
    given["references"] = text_list(given.get("references"), "references", "an image file's path", paths=True)
    if isinstance(grid, Sequence) and not isinstance(grid, str):
        given["grid"] = "x".join(str(int(v)) for v in grid)
    try:
        settings = build_settings({**given, "model": ready.name})
    except (TypeError, ValueError) as error:  # a GradcamError, or Python's own words for a value of the wrong type
        raise error if isinstance(error, GradcamError) else UsageError(f"an option of explain() has a wrong value ({error})") from None
    own = ModelSettings(name=ready.name, pretrained=ready.pretrained, weights=ready.weights, labels=ready.labels)
    return replace(settings, model=own)


def _layer_paths(model: nn.Module, layers: LayerSpec | Sequence[LayerSpec] | None) -> list[str]:
    """Dotted paths as given; a module of the model becomes its own path."""
    names = {id(module): name for name, module in model.named_modules()}
    paths = []
    for layer in [] if layers is None else [layers] if isinstance(layers, str) or not isinstance(layers, Sequence) else layers:
        if not isinstance(layer, str) and id(layer) not in names:
            raise LayerError(
                f"layer {type(layer).__name__} is not a module of this model",
                hint="pass one of model.model.modules() or a dotted path (see `gradcam layers`)",
            )
        paths.append(layer if isinstance(layer, str) else names[id(layer)])
    return paths


def _prepare(ready: ReadyModel, settings: ExplainSettings, layers: LayerSpec | Sequence[LayerSpec] | None) -> PreparedRun:
    """Method, layers, classes and options, resolved by the code that prepares a CLI run (run/prepare.py)."""
    paths = tuple(_layer_paths(ready.model, layers))
    settings = replace(settings, target=replace(settings.target, layers=paths))
    return prepare_run(
        settings, loaded=ready, device=ready.device, notices=False, warn=lambda message: warnings.warn(Notice(message), stacklevel=4)
    )


def _compute(run: PreparedRun, array: np.ndarray) -> CamBatch:
    """The maps of one preprocessed image, computed as a run computes a batch."""
    return run.compute(torch.from_numpy(np.stack([array]))).to_cpu()


def _class_map(
    run: PreparedRun, photo: np.ndarray, geometry: Geometry, cams: CamBatch, k: int, probabilities: torch.Tensor | None
) -> ClassMap:
    """One class's map put back onto the photo and drawn by the CLI writer's own functions, nothing written."""
    from PIL import Image

    outputs = run.settings.outputs
    shown, raw = photo_maps(cams.maps[0, k], geometry, raw_norm=run.settings.maps.norm is not Norm.minmax, with_raw=True)
    guided = None if cams.guided is None else Image.fromarray(guided_photo(cams.guided[0, k], geometry))
    record = target_record(cams, 0, k, probabilities, run.loaded.class_names)
    caption = caption_for(record, run.record_context(), run.kind) if outputs.caption else None
    scale = display_scale(cams.maps[0, k], run.settings.maps.norm is not Norm.minmax) if caption else None  # the band's colour scale
    heat = Image.fromarray(
        draw(photo, shown, style=outputs.style, colormap=outputs.colormap, alpha=outputs.alpha, caption=caption, scale=scale)
    )
    return ClassMap(
        record.class_index,
        record.class_name,
        record.probability,
        record.score,
        record.blank,
        _read_only(shown),
        _read_only(raw if raw is not None else shown),
        heat,
        guided,
        record,
        prompt=record.class_name if run.kind is TargetKind.prompt else None,
        similarity=record.score if run.kind in (TargetKind.prompt, TargetKind.reference) else None,
    )


def _explanation(run: PreparedRun, name: str, photo: np.ndarray, geometry: Geometry, cams: CamBatch) -> Explanation:
    """The maps, overlays and record of the image, built as the CLI's writer builds them."""
    if not bool(cams.finite[0]):
        raise InputError(f"{name}: the model's scores or gradients are not finite (NaN or inf) for this image")
    probabilities = image_probabilities(cams.logits[0], run.kind)
    targets = tuple(_class_map(run, photo, geometry, cams, k, probabilities) for k in cams.ranks(0))
    context = run.record_context()
    context["stamp"] = stamp_for(context)  # what the CLI's picture of this image would carry
    record = image_record(name, photo, [t.record for t in targets], probabilities, run.loaded.class_names, context)
    return Explanation(targets, record, _read_only(np.array(photo)), geometry)


def explain(
    image: str | os.PathLike | Image.Image | np.ndarray,
    model: ReadyModel | str,
    layers: LayerSpec | Sequence[LayerSpec] | None = None,
    method: str | None = None,
    classes: int | str | Sequence[int | str] | None = None,
    *,
    topk: int = 1,
    score_threshold: float | None = None,
    max_detections: int | None = None,
    min_area: float | None = None,
    crop: bool = False,
    colormap: str = "jet",
    alpha: float = 0.5,
    style: str = "overlay",
    caption: bool = False,
    relu: bool = True,
    norm: str = "minmax",
    combine: str | None = None,
    eigen_smooth: bool = False,
    aug_smooth: bool = False,
    cam_batch_size: int = 32,
    grid: tuple[int, int] | str | None = None,
    precision: str = "auto",
    max_pixels: int = DEFAULT_MAX_PIXELS,
    negative: bool = False,
    multilabel: bool = False,
    threshold: float | None = None,
    output_index: int | None = None,
    prompts: str | Sequence[str] | None = None,
    prompt_file: str | os.PathLike[str] | None = None,
    template: str | None = None,
    references: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None = None,
) -> Explanation:
    """Explain one image as `gradcam explain IMAGE` does, and return its maps and overlays instead of writing them.

    `image`: a file path, a PIL image or an (H, W, 3) uint8 RGB array; `model`: what load_model() returned (a name
    is loaded on every call). `layers` None takes the family default; `classes` None explains the top class (or the
    top `topk`), else an index or name, or a list of them: one ClassMap each. A detector's explanation has one
    ObjectMap per detection scoring at least `score_threshold`, at most `max_detections` (of `classes` if given; an
    instance segmenter's with its `mask`); a segmenter's one RegionMap per class covering at least `min_area` of the
    image (or per class of `classes`). `method` and `combine` None take the task's own (gradcam and mean; a
    detector's hirescam and sum; a segmenter's hirescam and mean). A CLIP-style model: one ClassMap per `prompts` (a
    text or a list, then `prompt_file`'s lines) with its `prompt` and `similarity`; an embedding model: one with its
    `similarity` to `references` (a path or a list). The other options are those of `gradcam explain` (README:
    `template`, with labels). The model is left as found: no hook, the same train/eval modes and requires_grad.
    """
    given = {k: v for k, v in locals().items() if k not in ("image", "model", "layers")}  # named as the option table
    ready = _ready(model)
    settings = _settings(ready, given)
    photo, name = photo_of(image, settings.inputs.max_pixels)
    with model_lock(ready.model):  # calls from several threads on one model take turns (placing it too)
        run = _prepare(ready, settings, layers)
        geometry = plan_geometry(photo.shape[:2], ready.data_config, crop=settings.inputs.crop)
        cams = _compute(run, to_input_array(photo, geometry, ready.data_config))
    if cams.found is not None and isinstance(cams.found[0], Segments):
        return segment_explanation(run, name, photo, geometry, cams)
    if cams.found is not None:
        return detection_explanation(run, name, photo, geometry, cams)
    return _explanation(run, name, photo, geometry, cams)


def _default_paths(model: nn.Module, x: torch.Tensor) -> list[str]:
    """cam()'s default layers, probed at x's own size: an image's (the family's), a clip's or a volume's."""
    if x.dim() == 5:
        return clip_layer_paths(model, tuple(int(s) for s in x.shape[1:]))
    return default_layer_paths(model, input_hw=(int(x.shape[-2]), int(x.shape[-1])))


def cam(
    model: nn.Module,
    x: torch.Tensor,
    layers: LayerSpec | Sequence[LayerSpec] | None = None,
    method: str = "gradcam",
    classes: int | Sequence[int] | None = None,
    *,
    grid: tuple[int, int] | str | None = None,
    eigen_smooth: bool = False,
    aug_smooth: bool = False,
    relu: bool = True,
    norm: str = "minmax",
    combine: str = "mean",
    cam_batch_size: int = 32,
    negative: bool = False,
) -> torch.Tensor:
    """Class activation maps (N, H, W) at the size of `x`, in [0, 1] unless norm="none"; of clips or volumes, `x`
    (N, C, T, H, W), maps (N, T, H, W) (gradient and activation methods only).

    `layers` are dotted paths (negative indices allowed) or modules of `model`; None takes the layer `gradcam explain`
    would (the family default, see `gradcam layers`); `classes` is None (each image's top class), one index for all,
    or one per image. The other options are those of `gradcam explain` (README). The model is left as it was found.
    Calls from several threads on one model take turns. Arguments of another type raise a UsageError.
    """
    return cam_batch(
        model,
        x,
        layers,
        method,
        classes,
        grid=grid,
        eigen_smooth=eigen_smooth,
        aug_smooth=aug_smooth,
        relu=relu,
        norm=norm,
        combine=combine,
        cam_batch_size=cam_batch_size,
        negative=negative,
    ).maps[:, 0]


def cam_batch(
    model: nn.Module,
    x: torch.Tensor,
    layers: LayerSpec | Sequence[LayerSpec] | None = None,
    method: str = "gradcam",
    classes: int | Sequence[int] | None = None,
    *,
    grid: tuple[int, int] | str | None = None,
    **options: Any,
) -> CamBatch:
    """cam() with what was explained (the classes, the scores): callers that label the maps (integrations/) need both.
    `options` are CamOptions' (cam()'s keywords; what is not given takes CamOptions' own default)."""
    checked_model(model)
    if isinstance(layers, str) or not isinstance(layers, Sequence | None):
        layers = [layers]
    resolved = [as_resolved(model, layer) for layer in layers] if layers is not None else None
    grid = checked_call(x, method, grid)
    if resolved is None:  # the family's default, probed at x's own size
        resolved = [as_resolved(model, path) for path in _default_paths(model, x)]
    cam_options = CamOptions(**{**options, "negative": bool(options.get("negative", False))})  # norm, combine read there
    return compute_cams(
        model,
        x,
        resolved,
        get_method(method),
        as_choice(classes),
        options=cam_options,
        num_prefix_tokens=getattr(model, "num_prefix_tokens", None),
        grid=grid,
        model_name=type(model).__name__,
    )
