"""Hugging Face transformers as a model hub: `hf:org/name` on the Hub, `hf:/local/dir` saved with save_pretrained.

`AutoModelForImageClassification` builds the network, or
`AutoModelForObjectDetection` where the config is a detector's (that mapping
holds its class: DETR and its kin, read by model/hf_detectors.py), or
`AutoModelForSemanticSegmentation` where it is a segmenter's (its `logits`,
(N, C, h, w), make it one by model/segmenters.py's rule), or `AutoModel` where
it is a CLIP-style pair of towers (model/hf_towers.py) or was saved from a base
model without a head (`Dinov2Model`: its pooled embedding is read as its
scores); its `AutoImageProcessor` gives the preprocessing (size, crop, mean,
std, resampling) and its config the class names (`id2label`). transformers is an optional extra, imported only when
such a model is asked for (`pip install 'gradcam-cli[hf]'`); `hf-hub:` stays
timm's. The forward returns a `ModelOutput`: model/outputs.py finds its
`logits`. Default layers are found by the modules' shape, not by fixed paths
(they moved between transformers 4 and 5): the last `layernorm_before` of a
ViT-like encoder (its head reads the class token, so the last block's input
still carries the patch tokens), else the last stage of an encoder's `stages`
(ConvNeXt, ResNet, RegNet) or `layers` (Swin, whose layers return tuples);
a segmenter's is its deepest feature map as its decode head reads it
(SEGMENTER_LAYERS); a CLIP-style model's, and a ViT-like encoder's whose norms
are named otherwise (DINOv2's `norm1`), its blocks' first norms
(model/towers.block_norms), in the image tower.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gradcam_cli.errors import UsageError
from gradcam_cli.model.data_config import IMAGENET_MEAN, IMAGENET_STD, PIL_RESAMPLE, DataConfig
from gradcam_cli.model.hf_towers import LOCATION, HfTowers
from gradcam_cli.model.towers import tower_stages

from torch import nn

PREFIX = "hf:"
PIL_FILTERS = {number: name for name, number in PIL_RESAMPLE.items()}  # a processor's `resample` → its interpolation's name
SEGMENTER_LAYERS = {  # a segmenter's model_type → where its decode head reads its deepest features, the first found
    # SegFormer's head reads every encoder stage's output: the last stage's (transformers 5: `stages`, each a map; 4: the
    # stage's closing `layer_norm`, tokens)
    "segformer": ("segformer.stages", "segformer.encoder.layer_norm"),
    # UperNet's head reads each backbone level through its norm (ConvNeXt, Swin): the last level's; else the head's own map
    # of that level, its pyramid pooling's bottleneck
    "upernet": ("backbone.hidden_states_norms", "decode_head.bottleneck"),
}
# class (and DeiT's distillation) tokens before the patches; a CLIP vision tower's class token, SigLIP's none
PREFIX_TOKENS = {"vit": 1, "beit": 1, "data2vec-vision": 1, "dinov2": 1, "deit": 2, "clip_vision_model": 1, "siglip_vision_model": 0}
TOWER_TYPES = ("clip", "siglip", "siglip2")  # CLIP-style configs (model/hf_towers.py): AutoModel builds both towers


def _transformers() -> Any:
    try:
        import transformers
    except ImportError:
        raise UsageError("hf: models need the transformers package, which is not installed", hint="pip install 'gradcam-cli[hf]'") from None
    transformers.logging.set_verbosity_error()  # its notices and progress bars on stderr are not ours to pass on
    transformers.logging.disable_progress_bar()
    return transformers


def is_local(arch: str) -> bool:
    return Path(arch).expanduser().is_dir() or arch.startswith(("/", "./", "../", "~"))


class HuggingFaceHub:
    """transformers' image classifiers, object detectors, semantic segmenters, CLIP-style models and base models
    without a head, named with the 'hf:' prefix."""

    name = "transformers"
    builds_unfilled = False  # transformers builds without initialising in its own from_pretrained

    def arch_of(self, name: str) -> str | None:
        """'hf:org/name' or 'hf:/a/dir' → what follows the prefix; other names are another hub's."""
        return name.strip()[len(PREFIX) :] if name.strip().startswith(PREFIX) else None

    def downloads(self, arch: str, pretrained: bool) -> bool:
        return not is_local(arch)  # even random weights need the Hub's config

    def build(self, arch: str, pretrained: bool, num_classes: int | None, kwargs: Mapping[str, Any] | None = None) -> nn.Module:
        """The classifier, detector, segmenter or base model with its weights (or random ones from its config); a
        checkpoint's head size via num_labels. Where it was built from is noted on it: its tokenizer is there."""
        transformers = _transformers()
        if is_local(arch) and not Path(arch).expanduser().is_dir():
            raise UsageError(f"⟨model=hf:{arch}⟩: no such folder", hint="give a folder written by save_pretrained, or hf:ORG/NAME")
        given: dict[str, Any] = dict(kwargs or {})
        if num_classes is not None:
            given.update(num_labels=num_classes, ignore_mismatched_sizes=True)
        location = str(Path(arch).expanduser()) if is_local(arch) else arch
        if pretrained:
            model = _auto_class(transformers, transformers.AutoConfig.from_pretrained(location)).from_pretrained(location, **given)
        else:
            config = transformers.AutoConfig.from_pretrained(location, **given)
            model = _auto_class(transformers, config).from_config(config)
        model.__dict__[LOCATION] = location  # a CLIP-style model's tokenizer is read from there (model/hf_towers.py)
        return model

    def weights_location(self, arch: str) -> tuple[str, str] | None:
        if is_local(arch):
            return None
        from gradcam_cli.model.downloads import hf_endpoint

        return "hf", hf_endpoint()

    def data_config(self, model: nn.Module, arch: str) -> DataConfig:
        """The image processor's size, crop, statistics and filter; without one, ImageNet's at the config's size."""
        processor = _processor(arch)
        side = _image_side(getattr(model, "config", None))
        if processor is None:
            return DataConfig(input_hw=(side, side), mean=IMAGENET_MEAN, std=IMAGENET_STD)
        settings = processor.to_dict()
        input_hw, crop_pct = _input_size(settings, side)
        return DataConfig(
            input_hw=input_hw,
            mean=_triple(settings.get("image_mean"), IMAGENET_MEAN),
            std=_triple(settings.get("image_std"), IMAGENET_STD),
            interpolation=PIL_FILTERS.get(int(settings.get("resample") or 2), "bilinear"),
            crop_pct=crop_pct,
        )

    def data_config_notice(self, arch: str, given: frozenset[str]) -> str | None:
        if _processor(arch) is not None or {"input_hw", "mean", "std"} <= given:
            return None
        return (
            f"hf:{arch} has no image processor config: assuming ImageNet's statistics at the model's size; set them with "
            "⟨input_size⟩, ⟨mean⟩ and ⟨std⟩"
        )

    def class_names(self, model: nn.Module, arch: str, num_classes: int) -> list[str] | None:
        """The config's id2label, unless it is transformers' placeholder (LABEL_0, LABEL_1, ...)."""
        labels = getattr(getattr(model, "config", None), "id2label", None) or {}
        names = [str(labels.get(i, labels.get(str(i), ""))) for i in range(num_classes)]
        if not all(names) or all(name == f"LABEL_{i}" for i, name in enumerate(names)):
            return None
        return names

    def default_layer(self, model: nn.Module, arch: str) -> str | None:
        """A segmenter's deepest feature map its head reads, else the last of the stages."""
        layers = [found] if (found := segmenter_layer(model)) else self.stage_layers(model, arch)
        return layers[-1] if layers else None

    def stage_layers(self, model: nn.Module, arch: str) -> list[str] | None:
        """A CLIP-style model's image tower's blocks, or a ViT-like encoder's (every k-th `layernorm_before`, else
        every k-th block's first norm), else an encoder's stages (Swin's too)."""
        if getattr(model, "config", None) is None or not type(model).__module__.startswith("transformers."):
            return None
        towers = HfTowers().accepts(model)
        if towers or self.num_prefix_tokens(model, arch) is not None:
            norms = [] if towers else [name for name, _ in model.named_modules() if name.endswith(".layernorm_before")]
            stages = tower_stages(model, HfTowers().image_tower(model) if towers else "", norms)
            if stages:
                return stages
        return _stages(model) or None

    def num_prefix_tokens(self, model: nn.Module, arch: str) -> int | None:
        if HfTowers().accepts(model):
            return HfTowers().num_prefix_tokens(model)
        model_type = str(getattr(getattr(model, "config", None), "model_type", ""))
        return PREFIX_TOKENS.get(model_type)


def _auto_class(transformers: Any, config: Any) -> Any:
    """The Auto class that builds this config: the detector's where its object-detection mapping holds the config's
    class, the segmenter's where the config is one's, the base model's where it is CLIP-style or was saved without a
    head, else the classifier's."""
    if type(config) in transformers.MODEL_FOR_OBJECT_DETECTION_MAPPING:
        return transformers.AutoModelForObjectDetection
    if _segments(config):
        return transformers.AutoModelForSemanticSegmentation
    if _headless(config):
        return transformers.AutoModel
    return transformers.AutoModelForImageClassification


def _headless(config: Any) -> bool:
    """A config AutoModel builds as it was saved: a CLIP-style pair of towers (its forward scores images against
    texts, not classes), or a base model whose saved classes have no task head (`Dinov2Model`, `ViTModel`,
    `CLIPVisionModel`; a head's class is named `...For<Task>`, CLIP's classifier too). A config naming no class is a
    classifier's, as before, unless it is CLIP-style."""
    architectures = [str(name) for name in getattr(config, "architectures", None) or []]
    if architectures:
        return not any("For" in name for name in architectures)
    return str(getattr(config, "model_type", "")) in TOWER_TYPES


def _segments(config: Any) -> bool:
    """A segmenter's config: saved from the class the semantic-segmentation mapping holds for its type (a SegFormer
    config also builds a classifier: its `architectures` tell which it was), or, naming none, of a type only that
    mapping holds (UperNet)."""
    from transformers.models.auto import modeling_auto

    model_type = str(getattr(config, "model_type", ""))
    segmenter = modeling_auto.MODEL_FOR_SEMANTIC_SEGMENTATION_MAPPING_NAMES.get(model_type)
    if segmenter is None:
        return False
    architectures = list(getattr(config, "architectures", None) or [])
    return segmenter in architectures if architectures else model_type not in modeling_auto.MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES


def segmenter_layer(model: nn.Module) -> str | None:
    """A transformers segmenter's default layer (SEGMENTER_LAYERS; a list's last member), None for other models."""
    config = getattr(model, "config", None)
    if config is None or not type(model).__name__.endswith("ForSemanticSegmentation"):
        return None
    modules = dict(model.named_modules())
    for path in SEGMENTER_LAYERS.get(str(getattr(config, "model_type", "")), ()):
        module = modules.get(path)
        if isinstance(module, (nn.ModuleList, nn.ModuleDict)):
            return f"{path}.{list(module._modules)[-1]}" if len(module) else None
        if module is not None:
            return path
    return None


def detector_data_config(arch: str) -> DataConfig | None:
    """A detector's input as its image processor makes it, None without one. A shortest edge (DETR: 800, the longest
    at most 1333, padded, never cropped) → a square of that edge, the photo letterboxed in; a height and width (RT-DETR:
    640x640) → that size, stretched to it as the processor resizes; its mean and std, or none where it does not
    normalise. transformers' detectors do not normalise their input themselves (torchvision's do), so we do."""
    processor = _processor(arch) if arch else None
    if processor is None:
        return None
    settings = processor.to_dict()
    size = settings.get("size") or {}
    size = {"shortest_edge": size} if isinstance(size, int) else size
    edge = size.get("shortest_edge") or size.get("longest_edge") or size.get("max_height")
    stretched = bool(size.get("height") and size.get("width"))
    side = int(edge or 800)
    input_hw = (int(size["height"]), int(size["width"])) if stretched else (side, side)
    normalises = settings.get("do_normalize", True)
    return DataConfig(
        input_hw=input_hw,
        mean=_triple(settings.get("image_mean"), IMAGENET_MEAN) if normalises else (0.0, 0.0, 0.0),
        std=_triple(settings.get("image_std"), IMAGENET_STD) if normalises else (1.0, 1.0, 1.0),
        interpolation=PIL_FILTERS.get(int(settings.get("resample") or 2), "bilinear"),
        fit="stretch" if stretched else "letterbox",
    )


def _processor(arch: str) -> Any:
    """The model's image processor, or None when it has none (or it cannot be fetched)."""
    transformers = _transformers()
    location = str(Path(arch).expanduser()) if is_local(arch) else arch
    try:
        return transformers.AutoImageProcessor.from_pretrained(location)
    except (OSError, ValueError, KeyError):
        return None


def _input_size(settings: dict[str, Any], side: int) -> tuple[tuple[int, int], float]:
    """The model input's size and the crop's share: a crop_size after a resize, a height x width, or a shortest edge."""
    size, crop = settings.get("size") or {}, settings.get("crop_size") or {}
    if isinstance(size, int):
        size = {"shortest_edge": size}
    if settings.get("do_center_crop") and crop.get("height"):
        resized = size.get("shortest_edge") or size.get("height") or crop["height"]
        return (int(crop["height"]), int(crop["width"])), min(1.0, crop["height"] / resized)
    if size.get("height"):
        return (int(size["height"]), int(size["width"])), 1.0
    if size.get("shortest_edge"):
        edge = int(size["shortest_edge"])
        return (edge, edge), float(settings.get("crop_pct") or 1.0)
    if settings.get("max_num_patches") and settings.get("patch_size"):  # SigLIP 2: a square of its most patches
        edge = math.isqrt(int(settings["max_num_patches"])) * int(settings["patch_size"])
        return (edge, edge), 1.0
    return (side, side), 1.0


def _image_side(config: Any) -> int:
    """The side the config says its images have (a CLIP-style config's in its vision config; SigLIP 2's from its
    patches: a square of as many as it takes), else 224."""
    vision = getattr(config, "vision_config", None) or config
    size = getattr(vision, "image_size", None)
    if size is None and getattr(vision, "num_patches", None) and getattr(vision, "patch_size", None):
        return int(math.isqrt(int(vision.num_patches))) * int(vision.patch_size)
    if size is None:
        return 224
    return size if isinstance(size, int) else int(size[0])


def _triple(value: Any, default: tuple[float, float, float]) -> tuple[float, float, float]:
    if isinstance(value, (int, float)):
        return float(value), float(value), float(value)
    if isinstance(value, (list, tuple)) and len(value) == 3:
        return float(value[0]), float(value[1]), float(value[2])
    return default


def _stages(model: nn.Module) -> list[str]:
    """The children of an encoder's `stages` (or `layers`) list, in order."""
    for list_name in ("stages", "layers"):
        for name, module in model.named_modules():
            if name.endswith(f"encoder.{list_name}") and isinstance(module, nn.ModuleList) and len(module):
                return [f"{name}.{i}" for i in range(len(module))]
    return []


HUGGING_FACE = HuggingFaceHub()
