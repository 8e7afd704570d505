"""timm as a model hub: its own names, 'hf-hub:ORG/NAME', and every name no other hub claims.

timm builds the model, fetches its weights and describes its preprocessing;
this module only asks it, the way the ModelSource interface (model/hub.py)
wants the answers.
"""

from __future__ import annotations

from collections.abc import Mapping

from typing import Any

from gradcam_cli.errors import UsageError
from gradcam_cli.model.blocks import every_kth
from gradcam_cli.model.data_config import DataConfig
from gradcam_cli.model.downloads import hf_endpoint
from gradcam_cli.model.messages import closest

from torch import nn

HF_HUB_PREFIX = "hf-hub:"


class TimmHub:
    """The fallback hub: it is last in the registry and reads any name as a timm name."""

    name = "timm"

    def arch_of(self, name: str) -> str | None:
        """timm names stay whole; a name timm does not know fails in build with its closest matches."""
        return name

    def downloads(self, arch: str, pretrained: bool) -> bool:
        """Pretrained weights come from the network; hf-hub names fetch their config either way."""
        return pretrained or arch.startswith(HF_HUB_PREFIX)

    def build(self, arch: str, pretrained: bool, num_classes: int | None, kwargs: Mapping[str, Any] | None = None) -> nn.Module:
        """timm.create_model (with the user's ⟨model_kwargs⟩), after a check that names close matches for a typo."""
        import timm

        if not arch.startswith(HF_HUB_PREFIX) and not timm.is_model(arch):
            known = timm.list_models()
            raise UsageError(
                f"unknown model '{arch}'{closest(arch.split('.')[0], known)}; "
                "name a timm model (timm.list_models()), 'hf-hub:ORG/NAME', or 'torchvision:ARCH'"
            )
        given: dict[str, Any] = dict(kwargs or {})
        if num_classes is not None:
            given["num_classes"] = num_classes
        return timm.create_model(arch, pretrained=pretrained, **given)

    def data_config_notice(self, arch: str) -> str | None:
        return None  # timm's models carry their data config

    def weights_location(self, arch: str) -> tuple[str, str] | None:
        """('hf', hub endpoint) or ('url', download URL), as timm itself would choose; None: nothing to fetch."""
        if arch.startswith(HF_HUB_PREFIX):
            return "hf", hf_endpoint()
        try:
            from timm.models import get_pretrained_cfg
            from timm.models._builder import _resolve_pretrained_source  # timm's own choice of source

            cfg = get_pretrained_cfg(arch)
            kind, location = _resolve_pretrained_source(cfg.to_dict()) if cfg is not None else ("", "")
        except Exception:  # noqa: BLE001 - a bad tag or another timm version: the build itself reports
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
        """timm models describe themselves: ViT-like blocks, else the last feature_info stage."""
        if _is_vit_like(model):
            # With a class token the last block's patch tokens get no gradient:
            # the input of the last block's attention still carries them.
            return "blocks.-1.norm1"
        info = getattr(model, "feature_info", None)
        if info:
            last = info[-1] if isinstance(info, list) else None
            if last is None and hasattr(info, "get_dicts"):
                last = info.get_dicts()[-1]
            if isinstance(last, dict) and last.get("module"):
                return str(last["module"])
        return None

    def stage_layers(self, model: nn.Module, arch: str) -> list[str] | None:
        """feature_info's modules; where every entry has one resolution (a ViT's blocks), every k-th, ending at the default."""
        if _is_vit_like(model):
            blocks: Any = model.blocks
            return [f"blocks.{i}.norm1" for i in every_kth(len(blocks))]
        info: Any = getattr(model, "feature_info", None)
        entries = [d for d in (info.get_dicts() if hasattr(info, "get_dicts") else info or []) if isinstance(d, dict)]
        names = list(dict.fromkeys(str(d["module"]) for d in entries if d.get("module")))
        if len({d.get("reduction") for d in entries}) == 1:
            return [names[i] for i in every_kth(len(names))]
        return names or None

    def num_prefix_tokens(self, model: nn.Module, arch: str) -> int | None:
        """timm models carry num_prefix_tokens themselves; nothing to add when one does not."""
        return None


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
