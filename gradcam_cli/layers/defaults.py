"""The default target layer: the one a careful user would pick for the model's family.

Each hub knows the look of its own models (model/hub.py: ModelSource.default_layer);
a model no hub has a rule for gets the last module that outputs a spatial map
or a token grid. The choice is then checked where the hubs' metadata can be
wrong: a name that is no module, a list the forward never calls, and a head
that reads a class token (layers/reach.py).
"""

from __future__ import annotations

import math

from typing import TYPE_CHECKING

from gradcam_cli.errors import LayerError
from gradcam_cli.layers.paths import ResolvedLayer, resolve_layer, run_by
from gradcam_cli.layers.reach import pools_a_class_token, reaching_layer
from gradcam_cli.model.blocks import is_norm
from gradcam_cli.layers.tree import spatial_sizes
from gradcam_cli.model.data_config import default_input_hw
from gradcam_cli.model.hub import SOURCES

from torch import nn

if TYPE_CHECKING:
    from gradcam_cli.model.hub import ModelSource


def default_layer_paths(
    model: nn.Module, arch: str = "", source: ModelSource | None = None, *, input_hw: tuple[int, int] | None = None
) -> list[str]:
    """The layer a careful user would pick: last spatial map the head still sees.

    The model's own hub is asked first, then every hub in registry order (a
    model built elsewhere may still have a known look); source None, for a
    bare module as the Python API gets, asks the registry only. A hub's name
    that is no module of the model counts as no answer; a ModuleList stands
    for its last child, the one the forward calls. The probes run at `input_hw`,
    the run's input size (a model made for 64x64 may not take the 224x224 guess).
    """
    input_hw = input_hw or default_input_hw(model)
    hubs = SOURCES if source is None else (source, *SOURCES)
    path = next((found for hub in hubs if (found := hub.default_layer(model, arch)) is not None), None)
    layer = _module_at(model, path) if path is not None else None
    if layer is not None and is_norm(layer.module):
        return [layer.path]  # a hub that names a norm has applied the class-token rule itself (ViT's `norm1`)
    layer = run_by(layer or resolve_layer(model, _last_spatial_module(model, input_hw)))
    if not pools_a_class_token(model):
        return [layer.path]
    return [reaching_layer(model, layer, input_hw, arch or type(model).__name__)]


def known_clip_layer(model: nn.Module) -> str | None:
    """A clip model's default layer as a hub knows it (torchvision's video classifiers, by their class), no probe."""
    path = next((found for hub in SOURCES if (found := hub.default_layer(model, "")) is not None), None)
    layer = _module_at(model, path) if path is not None else None
    if layer is None:
        return None
    return layer.path if is_norm(layer.module) else run_by(layer).path


def clip_layer_paths(model: nn.Module, input_shape: tuple[int, ...]) -> list[str]:
    """The default layer of a model that takes clips or volumes, `input_shape` (C, T, H, W): a hub's rule (torchvision's
    video classifiers), else the outermost module that last output a map with more than one cell (N, C, T, H, W) in a
    probe forward at that shape (a 3-D CNN's last stage)."""
    from gradcam_cli.layers.tree import probe_shapes

    known = known_clip_layer(model)
    if known is not None:
        return [known]
    shapes = probe_shapes(model, (input_shape[-2], input_shape[-1]), input_shape=input_shape)
    maps = [name for name, shape in shapes.items() if name and len(shape) == 5 and shape[0] == 1 and min(shape[2:]) > 1]
    if not maps:
        raise LayerError("no layer of this model outputs a map (N, C, T, H, W) of more than one cell; name one with ⟨layers⟩")
    return [maps[-1]]


def _module_at(model: nn.Module, path: str) -> ResolvedLayer | None:
    try:
        return resolve_layer(model, path)
    except LayerError:
        return None  # timm's feature_info names `block.3` in MViTv2 and Twins, which have none


def _last_spatial_module(model: nn.Module, input_hw: tuple[int, int]) -> str:
    """Fallback: the outermost module that last produced a map or a token grid in a probe forward."""
    # forward hooks fire when a module ends, so a stage comes after its last conv
    spatial = list(spatial_sizes(model, input_hw))
    if not spatial:
        raise LayerError("no layer of this model outputs a spatial map; name one with ⟨layers⟩")
    return spatial[-1]


def tower_layer_paths(model: nn.Module, tower: str, input_hw: tuple[int, int]) -> list[str]:
    """A CLIP-style model's default layer, in its image tower (model/towers.py): a transformer tower's last block's
    norm before attention (its output still carries every patch token; the class token is dropped by the layout
    rules), else the tower's last spatial map (a ResNet tower's last stage, before its attention pooling)."""
    from gradcam_cli.model.towers import block_norms

    norms = block_norms(model, tower)
    if norms:
        return [norms[-1]]
    inner = default_layer_paths(model.get_submodule(tower), input_hw=input_hw)
    return [f"{tower}.{path}" for path in inner]


def segmenter_layer_paths(model: nn.Module, input_size: tuple[int, ...], classes: int, channels: int = 3) -> list[str]:
    """A segmenter's default layer: its family's (model/segmenters.known_layers), else its deepest feature map (the smallest map, the
    outermost module finishing it last, the encoder's bottleneck), as Seg-Grad-CAM explains a U-Net; the score maps
    themselves (as many channels as classes) do not count, unless every map has that many (then the last module, the
    head, alone is left out). `input_size` (H, W), or a 3-D segmenter's (D, H, W), probed with `channels` channels."""
    from gradcam_cli.layers.tree import is_spatial, probe_shapes
    from gradcam_cli.model.segmenters import known_layers

    known = known_layers(model)
    if known is not None:
        return known
    calls: dict[str, int] = {}
    hw = (input_size[-2], input_size[-1])
    volume = len(input_size) == 3
    shapes = probe_shapes(model, hw, calls, input_shape=(channels, *input_size) if volume else None)

    def spatial(shape: tuple[int, ...]) -> bool:
        return len(shape) == 5 and min(shape[2:]) > 1 if volume else is_spatial(shape)

    maps = [(name, shape) for name, shape in shapes.items() if name and spatial(shape) and shape[0] == 1 and calls.get(name, 0) == 1]
    features = [(name, shape) for name, shape in maps if shape[1] != classes] or maps[:-1]
    if not features:
        raise LayerError("no layer of this segmenter outputs a feature map; name one with ⟨layers⟩")
    smallest = min(math.prod(shape[2:]) for _, shape in features)
    return [[name for name, shape in features if math.prod(shape[2:]) == smallest][-1]]


def task_layer_paths(model: nn.Module, arch: str, source: ModelSource, input_hw: tuple[int, int]) -> list[str]:
    """The default layers of a model `gradcam layers` lists, as a run would pick them: a CLIP-style model's (in its
    image tower), a segmenter's (its scores a map per class, found by one probe forward) or a classifier's; a model
    whose output the probe cannot read, a classifier's."""
    from gradcam_cli.errors import GradcamError
    from gradcam_cli.model.outputs import probed_output, scores_view
    from gradcam_cli.model.segmenters import segmenter_of
    from gradcam_cli.model.towers import text_image_family

    towers = text_image_family(model)
    if towers is not None:  # a CLIP-style model: its image tower's, as a run with prompts picks it
        return tower_layer_paths(model, towers.image_tower(model), input_hw)
    view = scores_view(model)
    try:
        segmenter = segmenter_of(probed_output(view, input_hw)[1])
    except GradcamError:
        segmenter = None
    if segmenter is not None:
        return segmenter_layer_paths(view, input_hw, segmenter.classes)
    return default_layer_paths(model, arch, source, input_hw=input_hw)
