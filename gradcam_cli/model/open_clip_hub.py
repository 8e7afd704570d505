"""open_clip as a model hub: `open_clip:ViT-B-32` (its first pretrained tag's weights), `open_clip:ViT-B-32/laion2b_s34b_b79k`
(the tag named), `open_clip:hf-hub:timm/ViT-B-16-SigLIP` (a model on the Hugging Face Hub).

`open_clip.create_model` builds the model, random with --no-pretrained; ⟨model_kwargs⟩ go to it (a small
`vision_cfg` and `text_cfg` build a tiny model, as the tests do). The preprocessing is the image tower's own
`preprocess_cfg` (size, mean, std, interpolation). The model is a CLIP-style pair of towers (model/open_clip_towers.py):
a run gives it prompts, labels or references (run/matching.py). open_clip is an optional extra, imported only for
these names (`pip install 'gradcam-cli[clip]'`).
"""

from __future__ import annotations

import contextlib
import difflib
import logging
from collections.abc import Iterator, Mapping
from typing import Any

from torch import nn

from gradcam_cli.errors import UsageError
from gradcam_cli.model.data_config import DataConfig
from gradcam_cli.model.messages import short
from gradcam_cli.model.open_clip_towers import OpenClipTowers
from gradcam_cli.model.towers import tower_stages

PREFIX = "open_clip:"
HUB_PREFIX = "hf-hub:"  # open_clip's own spelling of a model on the Hugging Face Hub, its weights with it
INSTALL = "pip install 'gradcam-cli[clip]'"


def _open_clip() -> Any:
    try:
        import open_clip
    except ImportError:
        raise UsageError("open_clip: models need the open_clip_torch package, which is not installed", hint=INSTALL) from None
    return open_clip


def parse_name(arch: str) -> tuple[str, str | None]:
    """'ViT-B-32/laion2b_s34b_b79k' → ('ViT-B-32', 'laion2b_s34b_b79k'); a hub name keeps its slashes, no tag."""
    if arch.startswith(HUB_PREFIX):
        return arch, None
    name, _, tag = arch.partition("/")
    return name.strip(), tag.strip() or None


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """open_clip logs 'No pretrained weights loaded' on the root logger for a random model: --no-pretrained says it."""
    logger = logging.getLogger()
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


class OpenClipHub:
    """open_clip's CLIP, SigLIP and CoCa models, named with the 'open_clip:' prefix."""

    name = "open_clip"
    builds_unfilled = False  # open_clip initialises its own (its logit scale is set at build)

    def arch_of(self, name: str) -> str | None:
        return name.strip()[len(PREFIX) :] if name.strip().startswith(PREFIX) else None

    def downloads(self, arch: str, pretrained: bool) -> bool:
        return pretrained or arch.startswith(HUB_PREFIX)  # a hub model's config comes from the Hub too

    def build(self, arch: str, pretrained: bool, num_classes: int | None, kwargs: Mapping[str, Any] | None = None) -> nn.Module:
        """create_model(name, pretrained=tag or None, **⟨model_kwargs⟩); an unknown name or tag is one line."""
        open_clip = _open_clip()
        name, tag = parse_name(arch)
        if not name.startswith(HUB_PREFIX):
            _check_name(open_clip, name)
            tag = _tag(open_clip, name, tag) if pretrained else None
        try:
            with _quiet():
                model = open_clip.create_model(name, pretrained=tag, **dict(kwargs or {}))
        except (TypeError, ValueError, KeyError, RuntimeError) as error:  # a bad argument, weights of another shape
            raise UsageError(f"⟨model=open_clip:{arch}⟩: {short(error)}") from error
        model.__dict__["_gradcam_open_clip_name"] = name  # its tokenizer is the name's (model/open_clip_towers.py)
        return model

    def weights_location(self, arch: str) -> tuple[str, str] | None:
        name, tag = parse_name(arch)
        cfg: dict[str, Any] = {}
        if not name.startswith(HUB_PREFIX) and tag is not None:
            cfg = _open_clip().get_pretrained_cfg(name, tag) or {}
        if cfg.get("url") and not cfg.get("hf_hub"):
            return "url", str(cfg["url"])
        from gradcam_cli.model.downloads import hf_endpoint

        return "hf", hf_endpoint()

    def data_config(self, model: nn.Module, arch: str) -> DataConfig:
        """The image tower's preprocess_cfg: its size, mean, std and interpolation (a centre crop of the whole: crop 1)."""
        cfg: dict[str, Any] = dict(getattr(model.get_submodule("visual"), "preprocess_cfg", None) or {})
        size = cfg.get("size", 224)
        hw = (int(size), int(size)) if isinstance(size, int) else (int(size[0]), int(size[1]))
        return DataConfig(
            input_hw=hw,
            mean=tuple(float(v) for v in cfg.get("mean", (0.48145466, 0.4578275, 0.40821073))),  # type: ignore[arg-type]
            std=tuple(float(v) for v in cfg.get("std", (0.26862954, 0.26130258, 0.27577711))),  # type: ignore[arg-type]
            interpolation=str(cfg.get("interpolation", "bicubic")),
            crop_pct=1.0,
        )

    def data_config_notice(self, arch: str, given: frozenset[str]) -> None:
        return None  # every open_clip model carries its preprocess_cfg

    def class_names(self, model: nn.Module, arch: str, num_classes: int) -> list[str] | None:
        return None  # a CLIP model's classes are the ⟨labels⟩ its prompts are made of

    def default_layer(self, model: nn.Module, arch: str) -> str | None:
        return None  # found in the image tower by layers/defaults.tower_layer_paths

    def stage_layers(self, model: nn.Module, arch: str) -> list[str] | None:
        """A transformer tower's blocks (every k-th block's first norm), else a ResNet tower's four stages."""
        if not OpenClipTowers().accepts(model):
            return None
        stages = tower_stages(model, "visual")
        if stages:
            return stages
        stages = [f"visual.layer{i}" for i in range(1, 5) if hasattr(model.get_submodule("visual"), f"layer{i}")]
        return stages or None

    def num_prefix_tokens(self, model: nn.Module, arch: str) -> int | None:
        return OpenClipTowers().num_prefix_tokens(model) if OpenClipTowers().accepts(model) else None


def _check_name(open_clip: Any, name: str) -> None:
    known = list(open_clip.list_models())
    if name not in known:
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
        hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
        raise UsageError(f"unknown open_clip model '{name}'{hint}; open_clip.list_models() lists them")


def _tag(open_clip: Any, name: str, tag: str | None) -> str:
    """The pretrained tag asked for, else the first open_clip lists for the model; one that it lacks is one line."""
    tags = list(open_clip.list_pretrained_tags_by_model(name))
    if not tags:
        raise UsageError(
            f"open_clip has no pretrained weights for '{name}'", hint="give ⟨weights=FILE⟩, or ⟨pretrained=False⟩ for random ones"
        )
    if tag is None:
        return tags[0]
    if tag not in tags:
        raise UsageError(f"'{tag}' is not a pretrained tag of open_clip's '{name}'; its tags: {', '.join(tags)}")
    return tag


OPEN_CLIP = OpenClipHub()
