"""segmentation_models_pytorch as a model hub: `smp:Unet?encoder_name=resnet18&classes=3`.

The name is an architecture `smp.create_model` knows (Unet, FPN,
DeepLabV3Plus, ...; any case), then, after `?`, its arguments as
`&`-separated KEY=VALUE, each value read as ⟨model_kwargs⟩ values are (JSON,
else text); ⟨model_kwargs⟩ add to them. ⟨pretrained⟩ decides the encoder's
weights (ImageNet's, or the set `encoder_weights` names; none with
--no-pretrained): the decoder starts random either way, so a real run gives
⟨weights⟩, the whole model's state dict. `activation` stays None: the output
is logits, read by model/segmenters.py's rule (a softmax, or a sigmoid for one
class). Preprocessing: ImageNet's statistics, which smp's pretrained encoders
expect, at 256x256 (any multiple of 32 works: ⟨input_size⟩). smp is an optional
extra, imported only for these names (`pip install 'gradcam-cli[smp]'`).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

import torch
from torch import nn

from gradcam_cli.errors import UsageError
from gradcam_cli.model.data_config import IMAGENET_MEAN, IMAGENET_STD, DataConfig
from gradcam_cli.model.messages import short
from gradcam_cli.model.state import eval_mode
from gradcam_cli.values import parse_kwarg

PREFIX = "smp:"
INPUT_SIDE = 256  # a multiple of 32, as every smp encoder's five halvings need
INSTALL = "pip install 'gradcam-cli[smp]'"


def _smp() -> Any:
    try:
        import segmentation_models_pytorch
    except ImportError:
        raise UsageError("smp: models need the segmentation_models_pytorch package, which is not installed", hint=INSTALL) from None
    return segmentation_models_pytorch


def parse_name(arch: str) -> tuple[str, dict[str, Any]]:
    """'Unet?encoder_name=resnet18&classes=3' → ('Unet', {'encoder_name': 'resnet18', 'classes': 3})."""
    architecture, _, query = arch.partition("?")
    kwargs: dict[str, Any] = {}
    for part in (unquote(text) for text in query.split("&") if text):
        key, equals, _ = part.partition("=")
        if not equals or not key.strip().isidentifier():
            raise UsageError(f"⟨model=smp:{arch}⟩: '{part}' is not KEY=VALUE; write smp:ARCH?KEY=VALUE&KEY=VALUE")
        kwargs.update([parse_kwarg(part)])
    return architecture.strip(), kwargs


def _closest(name: str, names: list[str]) -> str:
    """' (did you mean ...?)' for a mistyped name, matched without case; nothing when none is close."""
    lowered = {known.lower(): known for known in names}
    close = difflib.get_close_matches(name.lower(), list(lowered), n=3, cutoff=0.5)
    return f" (did you mean {', '.join(repr(lowered[c]) for c in close)}?)" if close else ""


class SmpHub:
    """segmentation_models_pytorch's segmenters, named with the 'smp:' prefix."""

    name = "smp"
    builds_unfilled = False  # pretrained weights fill the encoder only: the decoder's own initialisation must run

    def arch_of(self, name: str) -> str | None:
        return name.strip()[len(PREFIX) :] if name.strip().startswith(PREFIX) else None

    def downloads(self, arch: str, pretrained: bool) -> bool:
        return pretrained  # the encoder's ImageNet weights, from the Hugging Face Hub

    def build(self, arch: str, pretrained: bool, num_classes: int | None, kwargs: Mapping[str, Any] | None = None) -> nn.Module:
        """smp.create_model(arch, encoder_weights=..., **the name's and ⟨model_kwargs⟩' arguments); a checkpoint's
        class count as `classes`. A name, encoder or argument smp refuses is one line."""
        smp = _smp()
        architecture, given = parse_name(arch)
        given.update(kwargs or {})
        if num_classes is not None:
            given["classes"] = num_classes
        if given.get("activation") is not None:
            raise UsageError(f"⟨model=smp:{arch}⟩: leave activation out; the maps explain the logits, which the run reads itself")
        classes = {type_.__name__: type_ for type_ in smp.MODEL_ARCHITECTURES_MAPPING.values()}
        if architecture.lower() not in smp.MODEL_ARCHITECTURES_MAPPING:
            names = ", ".join(classes)
            raise UsageError(f"unknown segmentation_models_pytorch architecture '{architecture}'{_closest(architecture, list(classes))}; "
                             f"its architectures: {names}")  # fmt: skip
        encoder = str(given.get("encoder_name", "resnet34"))
        known = smp.encoders.get_encoder_names()
        if not encoder.startswith(("tu-", "timm-")) and encoder not in known:
            raise UsageError(f"unknown smp encoder '{encoder}'{_closest(encoder, known)}; smp.encoders.get_encoder_names() lists them, "
                             "and tu-NAME is a timm model")  # fmt: skip
        if not encoder.startswith(("tu-", "timm-")):
            _check_arguments(smp.MODEL_ARCHITECTURES_MAPPING[architecture.lower()], given, arch)
        own = given.pop("encoder_weights", True if encoder.startswith("tu-") else "imagenet")
        try:
            return smp.create_model(architecture, encoder_weights=own if pretrained else None, **given)
        except (TypeError, ValueError, KeyError) as error:  # a bad argument, an encoder the architecture does not take
            raise UsageError(f"⟨model=smp:{arch}⟩: {short(error)}") from error

    def weights_location(self, arch: str) -> tuple[str, str] | None:
        from gradcam_cli.model.downloads import hf_endpoint

        return "hf", hf_endpoint()

    def data_config(self, model: nn.Module, arch: str) -> DataConfig:
        """ImageNet's statistics at 256x256: what smp's pretrained encoders expect, at a size every encoder divides."""
        return DataConfig(input_hw=(INPUT_SIDE, INPUT_SIDE), mean=IMAGENET_MEAN, std=IMAGENET_STD)

    def data_config_notice(self, arch: str, given: frozenset[str]) -> None:
        return None  # ImageNet's statistics are smp's own convention, and any multiple of 32 is a size it takes

    def class_names(self, model: nn.Module, arch: str, num_classes: int) -> list[str] | None:
        return None  # smp models carry none: ⟨labels⟩ names them

    def default_layer(self, model: nn.Module, arch: str) -> str | None:
        return encoder_layer(model)

    def stage_layers(self, model: nn.Module, arch: str) -> list[str] | None:
        """The encoder's stages: the modules that return its feature maps, shallow to deep."""
        return [name for name in encoder_features(model) if name] or None

    def num_prefix_tokens(self, model: nn.Module, arch: str) -> int | None:
        return None


def _check_arguments(model_class: type, given: Mapping[str, Any], arch: str) -> None:
    """Refuse an argument the architecture does not name: smp passes the rest to a timm encoder only, and drops them
    for its own encoders without a word."""
    import inspect

    parameters = inspect.signature(model_class).parameters
    named = [name for name, p in parameters.items() if name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    unknown = [name for name in given if name not in named and name != "encoder_weights"]
    if unknown:
        raise UsageError(f"⟨model=smp:{arch}⟩: {model_class.__name__} takes no argument '{unknown[0]}'"
                         f"{_closest(unknown[0], named)}; it takes {', '.join(named)}")  # fmt: skip


def encoder_layer(model: nn.Module) -> str | None:
    """An smp model's default layer: its encoder's last stage, the deepest feature map, as Seg-Grad-CAM explains a
    U-Net's bottleneck. Not the decoder's output: that is the logits' input at full size, where a region's map only
    repeats the region (a 1x1 or 3x3 head reads each pixel where it is); the encoder's last stage is where the classes'
    evidence is gathered from the whole image, and every decoder reads it (FPN, DeepLabV3+'s ASPP, PSPNet's pyramid).
    None for other models, and for an encoder whose deepest map no module returns as it is (MiT's reshaped tokens)."""
    features = encoder_features(model)
    return features[-1] if features else None


def encoder_features(model: nn.Module) -> list[str | None]:
    """For each feature map an smp model's encoder returns, the outermost encoder module that returned that very
    tensor (None: none did, the input itself or a reshape), seen in one forward of a blank 256x256 image."""
    encoder = getattr(model, "encoder", None)
    if not type(model).__module__.startswith("segmentation_models_pytorch.") or not isinstance(encoder, nn.Module):
        return []
    made: dict[int, tuple[str, torch.Tensor]] = {}  # the tensors are held, so no id is reused during the forward

    def returned(name: str) -> Any:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            if isinstance(output, torch.Tensor):
                made[id(output)] = (name, output)  # an enclosing module returning the same tensor ends later: it wins

        return hook

    handles = [module.register_forward_hook(returned(f"encoder.{name}")) for name, module in encoder.named_modules() if name]
    parameter, shape = next(iter(model.parameters()), None), (1, int(getattr(encoder, "_in_channels", 3)), INPUT_SIDE, INPUT_SIDE)
    blank = torch.zeros(shape) if parameter is None else parameter.new_zeros(shape)
    try:
        with eval_mode(model), torch.no_grad():
            features = encoder(blank)
    except Exception:  # noqa: BLE001 - an encoder this probe does not fit (another input size): the probe rule decides
        return []
    finally:
        for handle in handles:
            handle.remove()
    return [made[id(feature)][0] if id(feature) in made else None for feature in features]


SMP = SmpHub()
