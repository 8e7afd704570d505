"""transformers' CLIP-style models as a family of model/towers.py: `CLIPModel` and `SiglipModel` (and SigLIP 2's
`Siglip2Model`), built by model/hf_hub.py from `hf:org/name` or `hf:/local/dir`, or by the user.

The image tower is `vision_model`; images are embedded by the model's own `get_image_features` (its projected pooled
output, the tensor its forward scores), texts by `get_text_features` over the model's own tokenizer (AutoTokenizer of
the folder or name it was built from), padded as the family was trained: SigLIP to the tokenizer's whole length (its
text tower pools the last position), CLIP to the longest text (it pools the end-of-text token). Pairs are scored as the
forward scores them: `logit_scale.exp()` times the cosine, plus SigLIP's `logit_bias` (read by its sigmoid). SigLIP 2
(NaFlex) takes its image as patches: the (N, 3, H, W) input is cut into them as its processor cuts a photo, the whole
image one grid, so the maps' layer still sees a (N, rows x cols, D) sequence without a class token.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import torch
from torch import nn

from gradcam_cli.errors import ModelError
from gradcam_cli.model.messages import short

CLIP_CLASSES = ("CLIPModel",)  # a class token before the patches, a softmax over the texts
SIGLIP_CLASSES = ("SiglipModel", "Siglip2Model")  # no class token (attention pooling), a bias, a sigmoid per pair
LOCATION = "_gradcam_hf_location"  # where model/hf_hub.py built the model from: its tokenizer is there too


class HfTowers:
    """transformers' CLIP and SigLIP models: the family of model/towers.py."""

    name = "transformers"

    def accepts(self, model: nn.Module) -> bool:
        return type(model).__module__.startswith("transformers.") and type(model).__name__ in CLIP_CLASSES + SIGLIP_CLASSES

    def embed_images(self, model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """The projected pooled output; called through the class, as `model` may be a shallow copy (a view)."""
        if type(model).__name__ == "Siglip2Model":
            features = type(model).get_image_features(model, **_patches(model, x))  # type: ignore[attr-defined]
        else:
            features = type(model).get_image_features(model, pixel_values=x)  # type: ignore[attr-defined]
        return features if isinstance(features, torch.Tensor) else features.pooler_output  # transformers 4: the tensor

    def embed_texts(self, model: nn.Module, texts: Sequence[str], device: torch.device) -> torch.Tensor:
        tokens = _tokens(model, texts)
        with torch.no_grad():
            features = type(model).get_text_features(model, **{k: v.to(device) for k, v in tokens.items()})  # type: ignore[attr-defined]
        return (features if isinstance(features, torch.Tensor) else features.pooler_output).float()

    def scale_and_bias(self, model: nn.Module) -> tuple[float, float]:
        scale: Any = model.logit_scale
        bias: Any = getattr(model, "logit_bias", None)
        return float(scale.detach().exp()), float(bias.detach()) if bias is not None else 0.0

    def image_tower(self, model: nn.Module) -> str:
        return "vision_model"

    def num_prefix_tokens(self, model: nn.Module) -> int | None:
        return 1 if type(model).__name__ in CLIP_CLASSES else 0


def _patches(model: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """SigLIP 2 takes its image as its processor gives it: patches of `patch_size` in rows, each flattened channels
    last, their grid's shape and a mask (none padded here: the whole image is one grid)."""
    n, c, h, w = x.shape
    config: Any = model.config
    patch = int(config.vision_config.patch_size)
    rows, cols = h // patch, w // patch
    if rows * patch != h or cols * patch != w:
        raise ModelError(f"SigLIP 2 takes images whose sides are multiples of its patch, {patch}; this one is {h}x{w}",
                         hint=f"give ⟨input_size⟩ a multiple of {patch}")  # fmt: skip
    patches = x.reshape(n, c, rows, patch, cols, patch).permute(0, 2, 4, 3, 5, 1).reshape(n, rows * cols, patch * patch * c)
    shapes = torch.tensor([[rows, cols]] * n, device=x.device)
    mask = torch.ones(n, rows * cols, dtype=torch.long, device=x.device)
    return {"pixel_values": patches, "spatial_shapes": shapes, "pixel_attention_mask": mask}


def _tokens(model: nn.Module, texts: Sequence[str]) -> dict[str, torch.Tensor]:
    """The texts as the model's own tokenizer gives them, only the inputs its text tower takes (SigLIP's: the ids)."""
    tokenizer = _tokenizer(location(model))
    config = getattr(getattr(model, "config", None), "text_config", None)
    longest = int(getattr(config, "max_position_embeddings", 0) or 0) or None
    length = min(filter(None, (longest, int(tokenizer.model_max_length or 0) or None)), default=None)
    padding = "max_length" if type(model).__name__ in SIGLIP_CLASSES else True
    encoded = tokenizer(list(texts), padding=padding, truncation=True, max_length=length, return_tensors="pt")
    return {key: encoded[key] for key in ("input_ids", "attention_mask") if key in encoded}


def location(model: nn.Module) -> str:
    """The folder or Hub name the model was built from: the hub's note, else transformers' own `name_or_path`."""
    found = model.__dict__.get(LOCATION) or getattr(getattr(model, "config", None), "_name_or_path", None)
    if not found:
        raise ModelError("this transformers model was not built from a folder or Hub name, so its tokenizer is not known",
                         hint="load it as ⟨model=hf:ORG/NAME⟩ or ⟨model=hf:/a/dir⟩ (saved with its tokenizer)")  # fmt: skip
    return str(found)


@lru_cache(maxsize=4)
def _tokenizer(where: str) -> Any:
    """AutoTokenizer of the model's folder or name; one that cannot be read, or is not there, is one line.

    transformers 5 builds a CLIP tokenizer without files (its special tokens alone, every word unknown) where the
    folder has none: a tokenizer that knows no more than its special tokens counts as none found."""
    from transformers import AutoTokenizer

    hint = "save the model's tokenizer beside it (tokenizer.save_pretrained(folder))"
    try:
        tokenizer = AutoTokenizer.from_pretrained(where)
    except ImportError as error:  # SigLIP's sentencepiece tokenizer without the sentencepiece package
        package = "pip install sentencepiece" if "sentencepiece" in str(error).lower() else "install the package it names"
        raise ModelError(f"the tokenizer of {where} needs a package that is not installed: {short(error)}", hint=package) from None
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ModelError(f"no tokenizer could be read from {where}: {short(error)}", hint=hint) from None
    if len(tokenizer) <= len(set(tokenizer.all_special_ids)):
        raise ModelError(f"no tokenizer was found in {where}: it knows no words", hint=hint)
    return tokenizer
