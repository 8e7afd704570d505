"""Layer outputs of a clip or a volume (an N×C×T×H×W input) → N×C×T×H×W, as layout.py does for images.

Video classifiers and 3-D CNNs give channels-first maps (Conv3d, BatchNorm3d),
channels-last ones (Swin3D's stages, N×T×H×W×C) and token sequences (MViT).
The module type says where the channels are when it can; else the shape must
leave one reading whose grid some downsampling of the input could make. A
token sequence's (T', H', W') grid is never guessed from its count (8x7x7 and
2x14x14 tokens are as many): it is taken from the model where the model says
it (MViT's positional grid and its blocks' query pooling), else refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gradcam_cli.errors import LayoutError
from gradcam_cli.layout import CLEAR_ASPECT_MARGIN, MAX_PREFIX_TOKENS, plausible_grid
from gradcam_cli.vocab import LayoutKind

import torch
from torch import nn

Grid3d = tuple[int, int, int]


@dataclass(frozen=True)
class LayoutHints3d:
    """What the module and the model tell us beyond a clip layer's shape."""

    channels_dim: int | None = None  # 1 or -1 when the module type implies it
    grid: tuple[int, ...] | None = None  # the user's grid: (H', W') or (T', H', W')
    token_grid: Grid3d | None = None  # the model's own (T', H', W') for this layer's tokens (mvit_token_grid)
    map_layer: str | None = None  # a layer of this model that outputs a map, named when another is refused


@dataclass(frozen=True)
class Layout3d:
    """How one layer's output maps onto N×C×T×H×W."""

    kind: LayoutKind
    grid: Grid3d
    prefix_tokens: int = 0

    def describe(self) -> str:
        t, h, w = self.grid
        if self.kind is LayoutKind.NLC:
            return f"NLC tokens, {self.prefix_tokens} prefix + {t}x{h}x{w} grid"
        return f"{self.kind.value} {t}x{h}x{w}"

    def to_nchw(self, t: torch.Tensor) -> torch.Tensor:
        """Channels first, N×C×T×H×W (named as the 2-D Layout's, so the engine's runners take either)."""
        if self.kind is LayoutKind.NCTHW:
            return t
        if self.kind is LayoutKind.NTHWC:
            return t.permute(0, 4, 1, 2, 3)
        gt, gh, gw = self.grid
        return t[:, self.prefix_tokens :, :].reshape(t.shape[0], gt, gh, gw, t.shape[-1]).permute(0, 4, 1, 2, 3)


def channels_dim_hint_3d(module: nn.Module) -> int | None:
    """Module types that fix where a clip layer's channels are, whatever the shape says; a container (a stage, a
    block) by the last of its modules that says (a 3-D CNN's stage ends in a Conv3d, a norm or a pool)."""
    own = _own_hint_3d(module)
    if own is not None:
        return own
    return next((hint for child in reversed(list(module.modules())[1:]) if (hint := _own_hint_3d(child)) is not None), None)


def _own_hint_3d(module: nn.Module) -> int | None:
    name = type(module).__name__
    if isinstance(module, (nn.Conv3d, nn.BatchNorm3d, nn.MaxPool3d, nn.AvgPool3d, nn.GroupNorm)):
        return 1
    if name.endswith(("3d", "3D")):
        return 1
    if isinstance(module, (nn.LayerNorm, nn.Linear)):
        return -1
    return None


def map_layer_of(model: nn.Module) -> str | None:
    """A layer to name in a refusal, one a run can read: an MViT's last block's `norm1` (tokens on the model's own
    grid), else the model's last Conv3d outside an attention (one inside pools each head's tokens: its batch is not
    the clips')."""
    blocks = getattr(model, "blocks", None)
    if isinstance(blocks, nn.ModuleList) and mvit_token_grid(model, f"blocks.{len(blocks) - 1}.norm1") is not None:
        return f"blocks.{len(blocks) - 1}.norm1"
    inside = {f"{name}." for name, module in model.named_modules() if name and "Attention" in type(module).__name__}
    found = [
        name
        for name, module in model.named_modules()
        if name and isinstance(module, nn.Conv3d) and not any(name.startswith(prefix) for prefix in inside)
    ]
    return found[-1] if found else None


def plausible_grid_3d(grid: Grid3d, input_thw: Grid3d) -> bool:
    """A (T', H', W') that some downsampling of the input could have made: time pooled on its own, space as an image's."""
    t, h, w = grid
    return 1 <= t <= input_thw[0] and plausible_grid(h, w, (input_thw[1], input_thw[2]))


def _shape_text(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ")"


def _size_text(size: tuple[int, ...]) -> str:
    return "x".join(str(s) for s in size)


def target_layout_3d(
    shape: tuple[int, ...], input_thw: Grid3d, hints: LayoutHints3d, layer: str, model_name: str = "the model"
) -> Layout3d:
    """A clip layer's layout, as a run reads it; one cell in all (a pooled output) shows no place or time: refused."""
    layout = detect_layout_3d(shape, input_thw, hints, layer, model_name)
    if math.prod(layout.grid) == 1:
        raise LayoutError(
            f"layer '{layer}' output {_shape_text(shape)} is one cell at the {_size_text(input_thw)} input, so its map "
            f"would be blank; give an earlier layer with ⟨layers⟩{_instead(hints)} (see: gradcam layers {model_name})"
        )
    return layout


def _instead(hints: LayoutHints3d) -> str:
    return f", such as '{hints.map_layer}'" if hints.map_layer else ""


def detect_layout_3d(
    shape: tuple[int, ...], input_thw: Grid3d, hints: LayoutHints3d, layer: str = "", model_name: str = "the model"
) -> Layout3d:
    """The layout of one layer output of a clip or a volume, from its shape, the input's (T, H, W) and the hints."""
    where = f"layer '{layer}' output {_shape_text(shape)}" if layer else f"output {_shape_text(shape)}"
    if len(shape) == 5:
        return _detect_5d(shape, input_thw, hints, where)
    if len(shape) == 3 and hints.token_grid is not None:
        prefix = shape[1] - math.prod(hints.token_grid)
        if 0 <= prefix <= MAX_PREFIX_TOKENS:
            return Layout3d(LayoutKind.NLC, hints.token_grid, prefix)
    if len(shape) == 3:
        raise LayoutError(
            f"{where} is a token sequence whose (T', H', W') grid this model does not say and its count cannot tell; "
            f"choose a layer that outputs a map{_instead(hints)} (see: gradcam layers {model_name})"
        )
    raise LayoutError(
        f"{where} has no (T, H, W) grid of the {_size_text(input_thw)} input; choose a layer that outputs a map "
        f"(N, C, T, H, W){_instead(hints)} (see: gradcam layers {model_name})"
    )


def _detect_5d(shape: tuple[int, ...], input_thw: Grid3d, hints: LayoutHints3d, where: str) -> Layout3d:
    first: Grid3d = (shape[2], shape[3], shape[4])
    last: Grid3d = (shape[1], shape[2], shape[3])
    readings = ((LayoutKind.NCTHW, first), (LayoutKind.NTHWC, last))
    if hints.grid is not None:
        matches = [Layout3d(k, g) for k, g in readings if g[-len(hints.grid) :] == tuple(hints.grid)]
        if matches:
            return matches[0]
        raise LayoutError(f"{where} has no {_size_text(hints.grid)} grid; check ⟨grid⟩")
    if hints.channels_dim == 1 and plausible_grid_3d(first, input_thw):
        return Layout3d(LayoutKind.NCTHW, first)
    if hints.channels_dim == -1 and plausible_grid_3d(last, input_thw):
        return Layout3d(LayoutKind.NTHWC, last)
    candidates = [Layout3d(k, g) for k, g in readings if plausible_grid_3d(g, input_thw)]
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise LayoutError(f"{where} matches no grid of the {_size_text(input_thw)} input; pass ⟨grid=HxW⟩")
    if first == last:  # C == T == H == W: both readings give the same grid; channels-first is the torch convention
        return Layout3d(LayoutKind.NCTHW, first)
    errors = sorted((_aspect_error(c.grid, input_thw), i) for i, c in enumerate(candidates))
    if errors[1][0] - errors[0][0] > CLEAR_ASPECT_MARGIN:
        return candidates[errors[0][1]]  # only one reading has the input's proportions
    raise LayoutError(
        f"{where} could be channels-first ({_size_text(first)} grid) or channels-last ({_size_text(last)} grid); "
        "pass ⟨grid=HxW⟩ to say which"
    )


def _aspect_error(grid: Grid3d, input_thw: Grid3d) -> float:
    """How far the rows' and columns' strides disagree (time has a stride of its own)."""
    return abs(math.log((input_thw[1] / grid[1]) / (input_thw[2] / grid[2])))


def mvit_token_grid(model: nn.Module, layer: str) -> Grid3d | None:
    """The (T', H', W') of an MViT layer's tokens, as the model computes it: its positional grid, then each block's
    query pooling (torchvision's MViT passes `thw` from block to block); None for a model or layer it does not cover.

    A block's `norm1` and `attn.qkv` see the block's input grid; the block itself, its `norm2`, `attn` and `mlp`
    its output grid (after its pooling); the final `norm` the last block's.
    """
    encoding, blocks = getattr(model, "pos_encoding", None), getattr(model, "blocks", None)
    temporal, spatial = getattr(encoding, "temporal_size", None), getattr(encoding, "spatial_size", None)
    if not isinstance(blocks, nn.ModuleList) or not isinstance(temporal, int) or spatial is None:
        return None
    grids: list[Grid3d] = [(temporal, int(spatial[0]), int(spatial[1]))]
    for block in blocks:
        grids.append(_pooled(grids[-1], getattr(getattr(block, "attn", None), "pool_q", None)))
    if layer == "norm":
        return grids[-1]
    parts = layer.split(".")
    if len(parts) < 2 or parts[0] != "blocks" or not parts[1].lstrip("-").isdigit():
        return None
    index = int(parts[1]) % len(blocks)
    inner = ".".join(parts[2:])
    if inner in ("norm1", "attn.qkv"):
        return grids[index]
    if inner in ("", "norm2", "attn", "mlp"):
        return grids[index + 1]
    return None


def _pooled(grid: Grid3d, pool: object) -> Grid3d:
    """The grid after a block's query pooling (torchvision's Pool: a Conv3d or MaxPool3d over the tokens' grid)."""
    inner = getattr(pool, "pool", None)
    if inner is None:
        return grid
    kernel, stride, padding = (_triple(getattr(inner, key)) for key in ("kernel_size", "stride", "padding"))
    sizes = ((g + 2 * p - k) // s + 1 for g, k, s, p in zip(grid, kernel, stride, padding))
    t, h, w = sizes
    return (t, h, w)


def _triple(value: object) -> Grid3d:
    if isinstance(value, int):
        return (value, value, value)
    t, h, w = (int(v) for v in value)  # type: ignore[attr-defined]
    return (t, h, w)
