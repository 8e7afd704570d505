"""CLIP-style models: an image tower and a text tower scored against each other, behind one seam as detectors are.

A family (open_clip's in model/open_clip_towers.py, transformers' CLIP and SigLIP in model/hf_towers.py) says, for the
models it recognises: how they embed a batch of images and a list of texts (their own tokenizer), how they score an
image against a text (cosine times the logit scale, plus SigLIP's bias), the image tower's dotted path and the prefix
tokens of its sequence. The loader finds the family after the build (model/load.py); run/matching.py turns the texts
(⟨prompt⟩, ⟨labels⟩ through ⟨template⟩) or reference images into queries, and the model into a view scoring images
against them (`similarity_view`), so the engine differentiates a similarity as it does a class score.
"""

from __future__ import annotations

import copy
import types
from dataclasses import dataclass
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch
from torch import nn

from gradcam_cli.model.blocks import every_kth, is_norm
from gradcam_cli.model.hf_towers import HfTowers
from gradcam_cli.model.open_clip_towers import OpenClipTowers

Embed = Callable[[nn.Module, torch.Tensor], torch.Tensor]  # (module, images (N, 3, H, W)) → embeddings (N, D)


class TextImageFamily(Protocol):
    """A family of CLIP-style models: what the loader, the layer defaults and the matching ask of it."""

    name: str

    def accepts(self, model: nn.Module) -> bool:
        """Whether the model is one of this family's (checked by its class, without importing the library)."""

    def embed_images(self, model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """(N, D) image embeddings, not normalised, in the graph (the maps differentiate through it). `model` may be a
        shallow copy of the loaded one (the same submodules): the family calls its class's methods on it."""

    def embed_texts(self, model: nn.Module, texts: Sequence[str], device: torch.device) -> torch.Tensor:
        """(P, D) text embeddings, not normalised, tokenised by the model's own tokenizer, without a graph."""

    def scale_and_bias(self, model: nn.Module) -> tuple[float, float]:
        """How the model scores an image against a text: logit = scale * cosine + bias (CLIP's bias 0, SigLIP's learnt)."""

    def image_tower(self, model: nn.Module) -> str:
        """The dotted path of the image tower (`visual`, `vision_model`): default layers are looked for inside it."""

    def num_prefix_tokens(self, model: nn.Module) -> int | None:
        """Class tokens before the patch tokens in the image tower's sequence (None: not known, the layout guesses)."""


@dataclass(frozen=True)
class Matched:
    """What a model's similarity view scores each image against (run/matching.py made it), as the run reports it."""

    task: str  # "prompt" (each text), "reference" (the references' mean embedding) or "classify" (zero-shot labels)
    names: tuple[str, ...]  # each query's name: its prompt, its label, the references'
    prompts: tuple[str, ...] = ()  # the texts embedded (a label's through the template)
    references: tuple[str, ...] = ()  # the reference images' paths


FAMILIES: tuple[TextImageFamily, ...] = (OpenClipTowers(), HfTowers())


def text_image_family(model: nn.Module) -> TextImageFamily | None:
    """The family whose image and text towers the model has, or None: not a CLIP-style model."""
    return next((family for family in FAMILIES if family.accepts(model)), None)


def similarity_view(model: nn.Module, embed: Embed, queries: torch.Tensor, scale: float = 1.0, bias: float = 0.0) -> nn.Module:
    """The model seen as scoring each image against each query: (N, Q) = scale * cosine(embed(x), queries) + bias.

    A shallow copy sharing every submodule, as model/outputs.scores_view is: the same dotted paths, hooks on them see
    the image tower's calls. The queries (Q, D) are fixed (a prompt's text embedding, a reference's image embedding),
    made once per run; they move with the images' device and dtype.
    """
    view = copy.copy(model)
    normalised = nn.functional.normalize(queries.detach().float(), dim=-1)
    view.__dict__.update(_gradcam_view=True, _gradcam_embed=embed, _gradcam_queries=normalised, _gradcam_scale=float(scale),
                         _gradcam_bias=float(bias), output_key=None)  # fmt: skip
    view.__dict__["forward"] = types.MethodType(_similarity_forward, view)  # bound, so a deep copy binds to the copy
    return view


def _similarity_forward(self: nn.Module, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    state = self.__dict__
    embedded = state["_gradcam_embed"](self, x)
    if embedded.dim() != 2:
        raise ValueError(f"the model's embedding must be (N, D); it is {tuple(embedded.shape)}")
    images = nn.functional.normalize(embedded, dim=-1)
    queries = state["_gradcam_queries"].to(device=images.device, dtype=images.dtype)
    return state["_gradcam_scale"] * images @ queries.T + state["_gradcam_bias"]


ATTENTION = ("Attention", "MultiheadAttention")  # the class names of an attention module (torch's, timm's, transformers')


def tower_stages(model: nn.Module, tower: str, norms: list[str] | None = None) -> list[str]:
    """The stages compare lays out of a transformer tower: every k-th of its blocks' first norms (`norms`, else
    block_norms'), [] for a tower without attention blocks."""
    norms = norms or block_norms(model, tower)
    return [norms[i] for i in every_kth(len(norms))] if norms else []


def block_norms(model: nn.Module, tower: str) -> list[str]:
    """In the image tower, each transformer block's first normalization (the one before its attention, whose output
    still carries every patch token), in forward order; [] for a tower without attention blocks (a ResNet's)."""
    found: list[str] = []
    for name, module in model.get_submodule(tower).named_modules():
        children = list(module.named_children())
        stack = isinstance(module, (nn.ModuleList, nn.Sequential)) and len(children) >= 2
        if not stack or not all(_is_block(child) for _, child in children) or len({type(c) for _, c in children}) != 1:
            continue
        for child, block in children:
            first = next((path for path, part in block.named_modules() if path and is_norm(part)), None)
            if first is not None:
                found.append(".".join(part for part in (tower, name, child, first) if part))
        if found:
            return found
    return found


def _is_block(module: nn.Module) -> bool:
    """A transformer block: a module with an attention inside and a normalization before it."""
    return any(type(part).__name__.endswith(ATTENTION) for part in module.modules())
