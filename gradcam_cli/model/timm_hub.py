"""timm as a model hub: its own names, 'hf-hub:ORG/NAME', and every name no other hub claims.

timm builds the model, fetches its weights and describes its preprocessing;
this module only asks it, the way the ModelSource interface (model/hub.py)
wants the answers.
"""

from __future__ import annotations

from collections.abc import Mapping

from typing import Any

from gradcam_cli.errors import UsageError, notify
from gradcam_cli.model.blocks import every_kth
from gradcam_cli.model.data_config import DataConfig
from gradcam_cli.model.downloads import hf_endpoint
from gradcam_cli.model.libraries import import_timm
from gradcam_cli.model.messages import closest, short

from torch import nn

HF_HUB_PREFIX = "hf-hub:"


class TimmHub:
    """The fallback hub: it is last in the registry and reads any name as a timm name."""

    name = "timm"
    builds_unfilled = True

    def arch_of(self, name: str) -> str | None:
        """timm names stay whole; a name timm does not know fails in build with its closest matches."""
        return name

    def downloads(self, arch: str, pretrained: bool) -> bool:
        """Pretrained weights come from the network; hf-hub names fetch their config either way."""
        return pretrained or arch.startswith(HF_HUB_PREFIX)

    def build(self, arch: str, pretrained: bool, num_classes: int | None, kwargs: Mapping[str, Any] | None = None) -> nn.Module:
        """timm.create_model (with the user's ⟨model_kwargs⟩), after a check that names close matches for a typo."""
        timm = import_timm()
        if not arch.startswith(HF_HUB_PREFIX) and not timm.is_model(arch):
            known = timm.list_models()
            raise UsageError(
                f"unknown model '{arch}'{closest(arch.split('.')[0], known)}; "
                "name a timm model (timm.list_models()), 'hf-hub:ORG/NAME', or 'torchvision:ARCH'"
            )
        given: dict[str, Any] = dict(kwargs or {})
        if num_classes is not None:
            given["num_classes"] = num_classes
        return _sized(timm.create_model(arch, pretrained=pretrained, **given), given.get("img_size"))

    def data_config_notice(self, arch: str, given: frozenset[str]) -> str | None:
        return None  # timm's models carry their data config

    def weights_location(self, arch: str) -> tuple[str, str] | None:
        """('hf', hub endpoint) or ('url', download URL), as timm itself would choose; None: nothing to fetch."""
        if arch.startswith(HF_HUB_PREFIX):
            return "hf", hf_endpoint()
        import_timm()
        from timm.models import get_pretrained_cfg

        try:
            cfg = get_pretrained_cfg(arch)
        except RuntimeError:  # a tag timm does not have: the build names it, in its one line
            return None
        try:
            from timm.models._builder import _resolve_pretrained_source  # timm's own choice of source, a private one

            kind, location = _resolve_pretrained_source(cfg.to_dict()) if cfg is not None else ("", "")
        except Exception as error:  # noqa: BLE001 - another timm version: build without the probe, and say so
            notify(
                f"{arch}: this timm does not say where its pretrained weights live ({short(error, 80)}); "
                "the hub is not probed first, so without a network the download may take a minute to fail"
            )
            return None
        if kind == "hf-hub":
            return "hf", hf_endpoint()
        return ("url", str(location)) if kind == "url" else None

    def data_config(self, model: nn.Module, arch: str) -> DataConfig:
        """timm's resolved data config: what the weights were trained with."""
        from timm.data import resolve_model_data_config

        cfg = resolve_model_data_config(model)
        size = cfg["input_size"]
        return DataConfig(
            input_hw=(int(size[1]), int(size[2])),
            mean=tuple(float(v) for v in cfg["mean"]),  # type: ignore[arg-type]
            std=tuple(float(v) for v in cfg["std"]),  # type: ignore[arg-type]
            interpolation=str(cfg.get("interpolation", "bilinear")),
            crop_pct=float(cfg.get("crop_pct", 1.0)),
            crop_mode=str(cfg.get("crop_mode", "center")),
        )

    def class_names(self, model: nn.Module, arch: str, num_classes: int) -> list[str] | None:
        """ImageNet class names from timm's metadata, when the head fits the subset it infers."""
        from timm.data import ImageNetInfo, infer_imagenet_subset

        subset = infer_imagenet_subset(model)
        if subset is None:
            return None
        info = ImageNetInfo(subset)
        if info.num_classes() != num_classes:
            return None
        return [info.index_to_description(i) for i in range(num_classes)]

    def default_layer(self, model: nn.Module, arch: str) -> str | None:
        """timm models describe themselves: ViT-like blocks, else the last feature_info stage (None: it names no module)."""
        if _is_vit_like(model):
            # With a class token the last block's patch tokens get no gradient:
            # the input of the last block's attention still carries them.
            return "blocks.-1.norm1"
        names = _feature_modules(model)
        return names[-1] if names else None  # a last stage that names no module: the probe-forward rule's

    def stage_layers(self, model: nn.Module, arch: str) -> list[str] | None:
        """feature_info's modules; where every entry has one resolution (a ViT's blocks), every k-th, ending at the default."""
        if _is_vit_like(model):
            blocks: Any = model.blocks
            return [f"blocks.{i}.norm1" for i in every_kth(len(blocks))]
        entries = _feature_entries(model)
        # a name that is no module stays as timm gives it: layers/stages.py says so and finds the stages itself
        found = [path or str(d.get("module") or "") for path, d in zip(_feature_modules(model), entries)]
        names = list(dict.fromkeys(name for name in found if name))
        if len({d.get("reduction") for d in entries}) == 1:
            return [names[i] for i in every_kth(len(names))]
        return names or None

    def num_prefix_tokens(self, model: nn.Module, arch: str) -> int | None:
        """timm models carry num_prefix_tokens themselves; nothing to add when one does not."""
        return None


def _sized(model: nn.Module, img_size: Any) -> nn.Module:
    """A model built for ⟨model_kwargs⟩ img_size says so in its pretrained_cfg, which its data config and the layer
    probes read; timm keeps the weights' size there, and a fixed-size model then fails at the first forward."""
    size = (img_size, img_size) if isinstance(img_size, int) else tuple(img_size) if isinstance(img_size, (tuple, list)) else ()
    cfg = getattr(model, "pretrained_cfg", None)
    if len(size) == 2 and all(isinstance(v, int) and v > 0 for v in size) and isinstance(cfg, dict):
        channels = (cfg.get("input_size") or (3,))[0]
        model.pretrained_cfg = {**cfg, "input_size": (channels, *size)}  # type: ignore[assignment]
    return model


def _feature_entries(model: nn.Module) -> list[dict[str, Any]]:
    """feature_info's entries (a list, or timm's FeatureInfo), one dict per stage."""
    info: Any = getattr(model, "feature_info", None)
    return [d for d in (info.get_dicts() if hasattr(info, "get_dicts") else info or []) if isinstance(d, dict)]


def _feature_modules(model: nn.Module) -> list[str | None]:
    """feature_info's module names as paths of this model, in order; None for one that names no module.

    A name is taken as given, else as the one module whose path ends with it
    (Gemma4's `blocks.15` is `encoder.blocks.15`); MViTv2's and Twins' `block.3`
    name nothing.
    """
    paths = [name for name, _ in model.named_modules()]
    found: list[str | None] = []
    for entry in _feature_entries(model):
        name = str(entry.get("module") or "")
        ends = [path for path in paths if path.endswith(f".{name}")]
        found.append(name if name and name in paths else ends[0] if name and len(ends) == 1 else None)
    return found


def _is_vit_like(model: nn.Module) -> bool:
    """Transformer blocks with norm1 after prefix tokens: the default is then inside the last block."""
    blocks = getattr(model, "blocks", None)
    if blocks is None or getattr(model, "num_prefix_tokens", 0) < 1:
        return False
    try:
        last = list(blocks.children())[-1]
    except (IndexError, AttributeError, TypeError):
        return False
    return hasattr(last, "norm1")


TIMM = TimmHub()
