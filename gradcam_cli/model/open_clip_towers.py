"""open_clip's CLIP-style models as a family of model/towers.py: `CLIP` (ViT and ResNet image towers) and
`CustomTextCLIP` (a timm image tower, an HF text tower; SigLIP's), built by model/open_clip_hub.py or by the user.

The image tower is `visual`; images are embedded by the model's own `encode_image`, texts by `encode_text` over its
own tokenizer's tokens (open_clip's `get_tokenizer`, by the name the model was built with), pairs scored as
open_clip's forward scores them: `logit_scale.exp()` times the cosine, plus `logit_bias` where the model has one
(SigLIP, whose pairs read as probabilities by their sigmoid).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from gradcam_cli.errors import ModelError

CLASSES = ("CLIP", "CustomTextCLIP", "CoCa")
OPEN_CLIP_VOCABULARY = 49408  # the size of open_clip's own BPE vocabulary (its SimpleTokenizer's)


class OpenClipTowers:
    """open_clip's models: the family of model/towers.py."""

    name = "open_clip"

    def accepts(self, model: nn.Module) -> bool:
        return type(model).__module__.startswith("open_clip.") and type(model).__name__ in CLASSES

    def embed_images(self, model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        return type(model).encode_image(model, x)  # type: ignore[attr-defined]

    def embed_texts(self, model: nn.Module, texts: Sequence[str], device: torch.device) -> torch.Tensor:
        tokens = _tokenizer(model)(list(texts)).to(device)
        with torch.no_grad():
            return type(model).encode_text(model, tokens).float()  # type: ignore[attr-defined]

    def scale_and_bias(self, model: nn.Module) -> tuple[float, float]:
        scale: Any = model.logit_scale
        bias: Any = getattr(model, "logit_bias", None)
        return float(scale.detach().exp()), float(bias.detach()) if bias is not None else 0.0

    def image_tower(self, model: nn.Module) -> str:
        return "visual"

    def num_prefix_tokens(self, model: nn.Module) -> int | None:
        visual = model.get_submodule("visual")
        trunk = getattr(visual, "trunk", None)  # a timm tower says its own
        if trunk is not None:
            return getattr(trunk, "num_prefix_tokens", None)
        if hasattr(visual, "class_embedding"):  # open_clip's VisionTransformer: a class token unless pooling without it
            return 0 if getattr(visual, "no_embed_class", False) else 1
        return None


def _tokenizer(model: nn.Module) -> Any:
    """The tokenizer of the name the model was built with (open_clip's own; a hub model's from its config); a model your
    code built with open_clip's own text tower (its 49,408-token vocabulary) takes open_clip's own BPE tokenizer."""
    import open_clip

    name = model.__dict__.get("_gradcam_open_clip_name")
    if name is not None:
        return open_clip.get_tokenizer(name)
    embedding = getattr(model, "token_embedding", None)
    if isinstance(embedding, nn.Embedding) and embedding.num_embeddings == OPEN_CLIP_VOCABULARY:
        return open_clip.tokenizer.SimpleTokenizer(context_length=int(getattr(model, "context_length", 77)))
    raise ModelError("this open_clip model was not built by name and its text tower is not open_clip's own, so its tokenizer is not known",
                     hint="load it as ⟨model=open_clip:NAME⟩ (with ⟨weights⟩ for your own checkpoint)")  # fmt: skip
