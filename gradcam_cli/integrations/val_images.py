"""`images=N`: the first N images of the validation loader, taken once, so every epoch shows the same pictures.

A trainer's validation loader may be one loader or several (a list, a dict, Lightning's CombinedLoader's iterables:
the first is taken), and its batches tensors, `(x, y)` tuples or dicts (`pixel_values`, `image`, `images`, `x`,
`input`). The batch is taken as the model takes it, normalised, as a tensor `images` is. Reading it must not move
training: a shuffling loader draws its order from torch's random state, so the random states are kept around it.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch

from gradcam_cli.errors import Notice
from gradcam_cli.integrations.snapshot import CamCallbackError, kept_random_states

IMAGE_KEYS = ("pixel_values", "image", "images", "x", "input", "inputs")


def no_loader(count: int, how: str) -> Exception:
    """The one line when `images=N` finds no validation loader, naming what to give."""
    what = f"images={count} takes the first {count} images of the validation loader"
    return CamCallbackError(f"CamCallback: {what}, and there is none: {how}")


def first_loader(loaders: Any) -> Iterable[Any] | None:
    """The validation loader: the one given, or the first of a list, tuple or dict of them (None: none)."""
    if loaders is None:
        return None
    if isinstance(loaders, Mapping):
        return first_loader(next(iter(loaders.values()), None))
    if isinstance(loaders, (list, tuple)):
        return first_loader(loaders[0]) if loaders else None
    iterables = getattr(loaders, "iterables", None)  # Lightning's CombinedLoader
    return first_loader(iterables) if iterables is not None and iterables is not loaders else loaders


def batch_images(batch: Any) -> torch.Tensor:
    """The images of one batch: the tensor itself, the first of a tuple or list, or a dict's image key."""
    if isinstance(batch, torch.Tensor):
        return batch
    if isinstance(batch, Mapping):
        for key in IMAGE_KEYS:
            if isinstance(batch.get(key), torch.Tensor):
                return batch[key]
        keys = ", ".join(map(str, list(batch)[:8]))
        where = "/".join(IMAGE_KEYS)
        raise CamCallbackError(f"CamCallback: a validation batch is a dict with no image tensor under {where} (keys: {keys}); give images")
    if isinstance(batch, Sequence) and batch and isinstance(batch[0], torch.Tensor):
        return batch[0]
    kind = type(batch).__name__
    raise CamCallbackError(f"CamCallback: a validation batch is a {kind}, not a tensor, (x, y) or dict of them; give images as a tensor")


def first_images(loader: Iterable[Any], count: int) -> torch.Tensor:
    """The first `count` images of `loader`, on the CPU; fewer if it holds fewer (said once, here), none: an error."""
    taken: list[torch.Tensor] = []
    have = 0
    with kept_random_states():
        for batch in loader:
            x = batch_images(batch).detach().to("cpu")
            taken.append(x[: count - have])
            have += len(taken[-1])
            if have >= count:
                break
    if not have:
        raise no_loader(count, "the validation loader gave no images; give images as paths or a tensor")
    if have < count:
        warnings.warn(Notice(f"CamCallback: images={count}, and the validation loader holds {have}: showing {have}"), stacklevel=3)
    return torch.cat(taken)
