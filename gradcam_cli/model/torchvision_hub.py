"""torchvision as a model hub: 'torchvision:ARCH' names its classification (images and video clips) and detection models.

torchvision's weights enums carry the download URL, the transforms and the
ImageNet categories; its modules carry no description of their own, so the
default target layers are a table of families here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from typing import Any

from gradcam_cli.errors import UsageError
from gradcam_cli.model.blocks import every_kth
from gradcam_cli.model.data_config import IMAGENET_MEAN, IMAGENET_STD, DataConfig, default_input_hw
from gradcam_cli.model.messages import closest
from gradcam_cli.model.libraries import import_torchvision

from torch import nn

PREFIX = "torchvision:"

# torchvision families whose last spatial map is not found by the generic rule
# (or where the generic rule picks a worse layer); first matching prefix wins.
DEFAULT_LAYERS: tuple[tuple[str, str], ...] = (
    ("vit_", "encoder.layers.-1.ln_1"),
    ("swin_", "features.-1"),
    ("maxvit_", "blocks.-1"),
    ("resnet", "layer4"),
    ("resnext", "layer4"),
    ("wide_resnet", "layer4"),
    ("regnet_", "trunk_output"),
    ("vgg", "features"),
    ("alexnet", "features"),
    ("densenet", "features"),
    ("squeezenet", "features"),
    ("mobilenet_", "features.-1"),
    ("efficientnet_", "features.-1"),
    ("convnext_", "features.-1"),
    ("mnasnet", "layers.-1"),
    ("shufflenet_", "conv5"),
    ("googlenet", "inception5b"),
    ("inception_v3", "Mixed_7c"),
    ("r3d_", "layer4"),  # the video classifiers (torchvision.models.video): maps N×C×T×H×W
    ("mc3_", "layer4"),
    ("r2plus1d_", "layer4"),
    ("s3d", "features.-1"),
    ("swin3d_", "norm"),  # channels last, N×T×H×W×C
    ("mvit_", "blocks.-1.norm1"),  # tokens, their grid the model's own (layout_3d.mvit_token_grid)
)
# the video classifiers by their class, for a module handed to the Python API without its name
VIDEO_CLASSES = {"VideoResNet": "layer4", "S3D": "features.-1", "SwinTransformer3d": "norm", "MViT": "blocks.-1.norm1"}
CLIP_LENGTH = 16  # frames per clip: what torchvision's video recipe trains with; MViT's positional grid fixes its own

RESNET_STAGES = ("layer1", "layer2", "layer3", "layer4")
# one layer per stage where the probe-forward rule reads the family less well; first matching prefix wins
STAGE_LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("resnet", RESNET_STAGES),
    ("resnext", RESNET_STAGES),
    ("wide_resnet", RESNET_STAGES),
    ("swin_", ("features.1", "features.3", "features.5", "features.7")),  # channels-last stages, between the patch mergings
)


class TorchvisionHub:
    """The models of torchvision.models, named with the 'torchvision:' prefix."""

    name = "torchvision"
    builds_unfilled = True

    def arch_of(self, name: str) -> str | None:
        """'torchvision:resnet50' → 'resnet50'; names without the prefix are another hub's."""
        return name[len(PREFIX) :] if name.startswith(PREFIX) else None

    def downloads(self, arch: str, pretrained: bool) -> bool:
        """Only pretrained weights are fetched: the architectures ship with torchvision."""
        return pretrained

    def build(self, arch: str, pretrained: bool, num_classes: int | None, kwargs: Mapping[str, Any] | None = None) -> nn.Module:
        """torchvision.models.get_model with the DEFAULT weights, after a check that names close matches."""
        torchvision = import_torchvision()
        models = torchvision.models
        with_backbone = list(models.list_models(module=models.detection)) + list(models.list_models(module=models.segmentation))
        names = list(models.list_models(module=models)) + list(models.list_models(module=models.video)) + with_backbone
        if arch not in names:
            raise UsageError(
                f"unknown torchvision model '{arch}'{closest(arch, names)}; torchvision's classification, video, detection "
                "and segmentation models are listed by torchvision.models.list_models()"
            )
        given: dict[str, Any] = dict(kwargs or {})
        if num_classes is not None:
            given["num_classes"] = num_classes
        if arch in with_backbone and not pretrained:
            given.setdefault("weights_backbone", None)  # random weights throughout: no ImageNet backbone is fetched (a
            # detector's or a segmenter's)
        return models.get_model(arch, weights="DEFAULT" if pretrained else None, **given)

    def data_config_notice(self, arch: str, given: frozenset[str]) -> str | None:
        return None  # the weights' transforms, or the ImageNet statistics torchvision's models are trained with

    def weights_location(self, arch: str) -> tuple[str, str] | None:
        """('url', the DEFAULT weights' URL): torch.hub downloads it; None when there are none."""
        url = getattr(_weights(arch), "url", None)
        return ("url", url) if url else None

    def data_config(self, model: nn.Module, arch: str) -> DataConfig:
        """The DEFAULT weights' transforms, with a video classifier's clip length; the ImageNet statistics without them."""
        config = self._image_config(model, arch)
        if not is_video_model(model):
            return config
        return replace(config, clip_length=clip_length(model))

    def _image_config(self, model: nn.Module, arch: str) -> DataConfig:
        """The DEFAULT weights' transforms; the ImageNet statistics at the model's size without them.

        A model that declares its input size (a ViT's `image_size`) is built for that size, whatever the DEFAULT
        weights were trained at: random vit_h_14 is 224, its SWAG weights 518; the crop follows the model.
        """
        weights = _weights(arch)
        if weights is None:
            h, w = default_input_hw(model)
            return DataConfig((h, w), IMAGENET_MEAN, IMAGENET_STD)
        t = weights.transforms()
        if not hasattr(t, "crop_size"):  # a segmenter's: the whole photo at the resize size (its transform keeps the
            side = int(t.resize_size[0])  # aspect; batches need one size, and a square stretches nothing out of the map)
            return DataConfig((side, side), tuple(float(v) for v in t.mean), tuple(float(v) for v in t.std))  # type: ignore[arg-type]
        crop = int(t.crop_size[0])
        resize = int(t.resize_size[0])
        built = getattr(model, "image_size", None)
        if isinstance(built, int) and built != crop:
            crop, resize = built, round(built * resize / crop)
        return DataConfig(
            input_hw=(crop, crop),
            mean=tuple(float(v) for v in t.mean),  # type: ignore[arg-type]
            std=tuple(float(v) for v in t.std),  # type: ignore[arg-type]
            interpolation=str(getattr(t.interpolation, "value", t.interpolation)),
            crop_pct=crop / resize,
        )

    def class_names(self, model: nn.Module, arch: str, num_classes: int) -> list[str] | None:
        """The DEFAULT weights' categories, when the head has as many outputs."""
        weights = _weights(arch)
        categories = weights.meta.get("categories") if weights is not None else None
        return list(categories) if categories and len(categories) == num_classes else None

    def default_layer(self, model: nn.Module, arch: str) -> str | None:
        """The family table: first matching architecture prefix wins; a video classifier without its name, by its class."""
        for prefix, path in DEFAULT_LAYERS:
            if arch.startswith(prefix):
                return path
        return VIDEO_CLASSES.get(type(model).__name__) if _from_torchvision(model) else None

    def stage_layers(self, model: nn.Module, arch: str) -> list[str] | None:
        """The family table; vgg, alexnet: the map before each max-pool, then `features`; vit: every k-th encoder layer.

        None for the others: the probe-forward rule (layers/stages.py) finds theirs (efficientnet, mobilenet, convnext, ...).
        """
        features = getattr(model, "features", None)
        if arch.startswith(("vgg", "alexnet")) and isinstance(features, nn.Sequential):
            children = list(features.named_children())
            pools = [i for i, (_, module) in enumerate(children) if isinstance(module, nn.MaxPool2d) and 0 < i < len(children) - 1]
            return [f"features.{children[i - 1][0]}" for i in pools] + ["features"]
        layers = getattr(getattr(model, "encoder", None), "layers", None)
        if arch.startswith("vit_") and isinstance(layers, nn.Sequential):
            return [f"encoder.layers.{i}.ln_1" for i in every_kth(len(layers))]
        return next((list(paths) for prefix, paths in STAGE_LAYERS if arch.startswith(prefix)), None)

    def num_prefix_tokens(self, model: nn.Module, arch: str) -> int | None:
        """torchvision's ViT prepends one class token and does not say so on the module."""
        return 1 if arch.startswith("vit_") else None


def _from_torchvision(model: nn.Module) -> bool:
    return type(model).__module__.startswith("torchvision.models.video")


def is_video_model(model: nn.Module) -> bool:
    """One of torchvision's video classifiers (its input N×C×T×H×W)."""
    return _from_torchvision(model) and type(model).__name__ in VIDEO_CLASSES


def clip_length(model: nn.Module) -> int:
    """Frames per clip: MViT's from its positional grid (its time steps times the patch embedding's stride), else 16."""
    encoding, embed = getattr(model, "pos_encoding", None), getattr(model, "conv_proj", None)
    steps, stride = getattr(encoding, "temporal_size", None), getattr(embed, "stride", None)
    if isinstance(steps, int) and isinstance(stride, tuple):
        return steps * int(stride[0])
    return CLIP_LENGTH


def _weights(arch: str) -> Any:
    """The architecture's DEFAULT weights enum member, or None when it has none."""
    try:
        return import_torchvision().models.get_model_weights(arch).DEFAULT
    except (ValueError, AttributeError, KeyError):
        return None


TORCHVISION = TorchvisionHub()
