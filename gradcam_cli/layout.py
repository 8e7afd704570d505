"""Layer outputs in any layout → N×C×H×W, so no user writes a reshape function.

Handles channels-first maps, channels-last maps (Swin, ConvNeXt block
internals, `output_fmt='NHWC'`) and token sequences with prefix tokens (class,
distillation, register tokens). The grid comes from the real input size, so
non-square and resized inputs work. For token sequences the model's patch
embedding, asked for this input size, gives the real patch grid, and each
layer's prefix count is its token count minus the grid cells: a model-wide
count is wrong before the prefix tokens are added (`patch_embed`, CaiT and
XCiT blocks). When the shape alone cannot decide, the error says so and
`--grid HxW` settles it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gradcam_cli.errors import LayoutError, notify, one_line
from gradcam_cli.vocab import LayoutKind

import torch
from torch import nn

MAX_PREFIX_TOKENS = 16
STRIDE_RATIO_LIMIT = 1.5  # how far the row and column strides may disagree
CLEAR_ASPECT_MARGIN = 0.1  # log-ratio by which one reading must follow the input's aspect better


@dataclass(frozen=True)
class LayoutHints:
    """What the model and the user tell us beyond the tensor's shape."""

    num_prefix_tokens: int | None = None  # model-wide: only true once the prefix tokens are added
    grid: tuple[int, int] | None = None  # the user's --grid
    channels_dim: int | None = None  # 1 or -1 when the module type implies it
    patch_grid: tuple[int, int] | None = None  # the patch embedding's grid for this input size (see patch_grid)


@dataclass(frozen=True)
class Layout:
    """How one layer's output maps onto N×C×H×W."""

    kind: LayoutKind
    grid: tuple[int, int]
    prefix_tokens: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", LayoutKind(self.kind))  # "NLC" from a caller is the member

    def describe(self) -> str:
        h, w = self.grid
        if self.kind is LayoutKind.NLC:
            return f"NLC tokens, {self.prefix_tokens} prefix + {h}x{w} grid"
        return f"{self.kind.value} {h}x{w}"

    def to_nchw(self, t: torch.Tensor) -> torch.Tensor:
        if self.kind is LayoutKind.NCHW:
            return t
        if self.kind is LayoutKind.NHWC:
            return t.permute(0, 3, 1, 2)
        h, w = self.grid
        return t[:, self.prefix_tokens :, :].reshape(t.shape[0], h, w, t.shape[-1]).permute(0, 3, 1, 2)


def channels_dim_hint(module: nn.Module) -> int | None:
    """Module types that fix where the channels are, whatever the shape says."""
    name = type(module).__name__
    if isinstance(module, (nn.Conv2d, nn.BatchNorm2d, nn.GroupNorm, nn.MaxPool2d, nn.AvgPool2d)):
        return 1
    if name.endswith("2d") or name.endswith("2D"):
        return 1
    if isinstance(module, (nn.LayerNorm, nn.Linear)):
        return -1
    fmt = getattr(module, "output_fmt", None)
    if fmt is not None and str(getattr(fmt, "value", fmt)).upper() == "NHWC":
        return -1
    return None


def patch_grid(model: nn.Module, input_hw: tuple[int, int]) -> tuple[int, int] | None:
    """The patch-token grid a ViT-like model makes of an input of this size, or None when it does not say.

    Asked of the model, not guessed from token counts: 196 tokens read as
    1 prefix + 13x15 as readily as 0 + 14x14, and only the embedding knows.
    """
    embed = getattr(model, "patch_embed", None)  # timm
    patch = getattr(embed, "patch_size", None)
    if embed is None:
        embed, patch = getattr(model, "conv_proj", None), getattr(model, "patch_size", None)  # torchvision ViT
    if embed is None or not _is_module(embed):
        return None
    size = (int(input_hw[0]), int(input_hw[1]))
    feat_size = getattr(embed, "dynamic_feat_size", None)  # timm PatchEmbed, HybridEmbed: padding, backbone strides
    if callable(feat_size):
        try:
            return _grid_or_none(feat_size(size))
        except Exception as error:  # noqa: BLE001 - an unusual embedding: fall back to the shape, and say so
            notify(
                f"the patch embedding ({type(embed).__name__}) did not give its grid for the {size[0]}x{size[1]} input "
                f"({one_line(error, 60)}); token layers are read from their count, which can pick another grid: "
                "⟨grid=HxW⟩ settles it"
            )
            return None
    return _conv_chain_grid(embed, patch, size)


def _is_module(value: object) -> bool:

    return isinstance(value, nn.Module) and not isinstance(value, (nn.ModuleList, nn.ModuleDict))


def _grid_or_none(grid: object) -> tuple[int, int] | None:
    try:
        gh, gw = (int(g) for g in grid)  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        return None
    return (gh, gw) if gh >= 1 and gw >= 1 else None


def _conv_chain_grid(embed: nn.Module, patch: object, size: tuple[int, int]) -> tuple[int, int] | None:
    """The grid of an embedding that is a chain of convolutions (torchvision ViT, XCiT's conv stem).

    Trusted only when the convolutions' strides multiply to the stated patch
    size: anything else in the embedding (a pooling) would change the grid.
    """
    convs = [m for m in embed.modules() if isinstance(m, nn.Conv2d)]
    if not convs or patch is None or any(isinstance(c.padding, str) for c in convs):
        return None
    patch_hw = (patch, patch) if isinstance(patch, int) else tuple(patch)  # type: ignore[arg-type]
    grid: list[int] = list(size)
    stride = [1, 1]
    for conv in convs:
        for i in (0, 1):
            span = conv.dilation[i] * (conv.kernel_size[i] - 1) + 1
            padding = int(conv.padding[i])  # str paddings ("same") were refused above
            grid[i] = (grid[i] + 2 * padding - span) // conv.stride[i] + 1
            stride[i] *= conv.stride[i]
    return _grid_or_none(grid) if tuple(stride) == tuple(patch_hw) else None


def plausible_grid(h: int, w: int, input_hw: tuple[int, int]) -> bool:
    """A spatial size that some downsampling of the input could have produced."""
    in_h, in_w = input_hw
    if h < 1 or w < 1 or h > in_h or w > in_w:
        return False
    stride_h, stride_w = in_h / h, in_w / w
    ratio = max(stride_h, stride_w) / min(stride_h, stride_w)
    # small maps round a lot: 5x4 from 160x120 is fine
    slack = 1.0 + 1.0 / min(h, w)
    return ratio <= STRIDE_RATIO_LIMIT * slack


def _shape_text(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ")"


def detect_layout(
    shape: tuple[int, ...], input_hw: tuple[int, int], hints: LayoutHints, layer: str = "", model_name: str = "the model"
) -> Layout:
    """Decide the layout of one layer output from its shape, the input size and hints."""
    where = f"layer '{layer}' output {_shape_text(shape)}" if layer else f"output {_shape_text(shape)}"
    if len(shape) == 4:
        return _detect_4d(shape, input_hw, hints, where)
    if len(shape) == 3:
        return _detect_tokens(shape, input_hw, hints, where)
    raise LayoutError(f"{where} has no spatial dimensions; choose a layer that outputs a map or tokens (see: gradcam layers {model_name})")


def target_layout(
    shape: tuple[int, ...], input_hw: tuple[int, int], hints: LayoutHints, layer: str, model_name: str = "the model"
) -> Layout:
    """A target layer's layout, as a run reads it: one cell (a pooled output, or an input too small for the layer's
    downsampling) holds no place, so every map of it would be blank; refused, saying why, instead."""
    layout = detect_layout(shape, input_hw, hints, layer, model_name)
    if layout.grid == (1, 1):
        raise LayoutError(
            f"layer '{layer}' output {_shape_text(shape)} is a 1x1 grid at the {input_hw[0]}x{input_hw[1]} input: one cell "
            f"shows no place, so its map would be blank; give a larger ⟨input_size⟩ or an earlier layer with ⟨layers⟩ "
            f"(see: gradcam layers {model_name})"
        )
    return layout


def _detect_4d(shape: tuple[int, ...], input_hw: tuple[int, int], hints: LayoutHints, where: str) -> Layout:
    nchw, nhwc = (shape[2], shape[3]), (shape[1], shape[2])
    if hints.grid is not None:
        if nchw == hints.grid:
            return Layout(LayoutKind.NCHW, nchw)
        if nhwc == hints.grid:
            return Layout(LayoutKind.NHWC, nhwc)
        raise LayoutError(f"{where} has no {hints.grid[0]}x{hints.grid[1]} grid; check ⟨grid⟩")
    if hints.channels_dim == 1 and plausible_grid(*nchw, input_hw):
        return Layout(LayoutKind.NCHW, nchw)
    if hints.channels_dim == -1 and plausible_grid(*nhwc, input_hw):
        return Layout(LayoutKind.NHWC, nhwc)
    candidates = [Layout(k, g) for k, g in ((LayoutKind.NCHW, nchw), (LayoutKind.NHWC, nhwc)) if plausible_grid(*g, input_hw)]
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise LayoutError(f"{where} matches no spatial grid of the {input_hw[0]}x{input_hw[1]} input; pass ⟨grid=HxW⟩")
    if nchw == nhwc:  # C == H == W: both readings give the same grid; channels-first is the torch convention
        return Layout(LayoutKind.NCHW, nchw)
    errors = sorted((_aspect_error(c.grid, input_hw), i) for i, c in enumerate(candidates))
    if errors[1][0] - errors[0][0] > CLEAR_ASPECT_MARGIN:
        return candidates[errors[0][1]]  # only one reading has the input's proportions
    raise LayoutError(
        f"{where} could be channels-first ({nchw[0]}x{nchw[1]} grid) or channels-last "
        f"({nhwc[0]}x{nhwc[1]} grid); pass ⟨grid=HxW⟩ to say which"
    )


def _aspect_error(grid: tuple[int, int], input_hw: tuple[int, int]) -> float:
    """How far a grid's row and column strides disagree (0: the grid follows the input's aspect)."""
    return abs(math.log((input_hw[0] / grid[0]) / (input_hw[1] / grid[1])))


def _token_grid(count: int, input_hw: tuple[int, int]) -> tuple[int, int] | None:
    """The factorisation of `count` tokens whose shape best follows the input's aspect."""
    if count < 1:
        return None
    best: tuple[float, tuple[int, int]] | None = None
    for h in range(1, int(math.isqrt(count)) + 1):
        if count % h:
            continue
        for gh, gw in ((h, count // h), (count // h, h)):
            if not plausible_grid(gh, gw, input_hw):
                continue
            error = _aspect_error((gh, gw), input_hw)
            if best is None or error < best[0]:
                best = (error, (gh, gw))
    return best[1] if best else None


def _detect_tokens(shape: tuple[int, ...], input_hw: tuple[int, int], hints: LayoutHints, where: str) -> Layout:
    tokens = shape[1]
    if hints.grid is not None:
        return _user_token_grid(tokens, input_hw, hints, where)
    layout = _infer_tokens(tokens, input_hw, hints)
    if layout is None:
        raise LayoutError(
            f"{where} looks like {tokens} tokens but no grid of the {input_hw[0]}x{input_hw[1]} input fits; "
            "pass ⟨grid=HxW⟩ (rows x columns of patch tokens)"
        )
    return layout


def _infer_tokens(tokens: int, input_hw: tuple[int, int], hints: LayoutHints) -> Layout | None:
    """The patch grid when this layer's tokens are its cells plus a few prefix tokens, else the older clues.

    The prefix count is decided per layer: the model-wide one is wrong before
    the prefix tokens are added (`patch_embed`; CaiT and XCiT add the class
    token after their blocks). Hierarchical or pooled stages fall through.
    """
    if hints.patch_grid is not None:
        gh, gw = hints.patch_grid
        if 0 <= tokens - gh * gw <= MAX_PREFIX_TOKENS:
            return Layout(LayoutKind.NLC, (gh, gw), tokens - gh * gw)
    if hints.num_prefix_tokens is not None:
        grid = _token_grid(tokens - hints.num_prefix_tokens, input_hw)
        if grid is not None:
            return Layout(LayoutKind.NLC, grid, hints.num_prefix_tokens)
    return _guess_prefix(tokens, input_hw)


def _user_token_grid(tokens: int, input_hw: tuple[int, int], hints: LayoutHints, where: str) -> Layout:
    """`--grid` for tokens: it must leave 0..MAX_PREFIX_TOKENS prefix tokens, or it reads noise as a map."""
    assert hints.grid is not None
    h, w = hints.grid
    prefix = tokens - h * w
    if 0 <= prefix <= MAX_PREFIX_TOKENS:
        return Layout(LayoutKind.NLC, (h, w), prefix)
    if prefix < 0:
        problem = f"⟨grid={h}x{w}⟩ needs {h * w}"
    else:
        problem = f"⟨grid={h}x{w}⟩ leaves {prefix} of them as prefix tokens (at most {MAX_PREFIX_TOKENS})"
    fit = _infer_tokens(tokens, input_hw, hints)
    if fit is None:
        advice = f"no grid of the {input_hw[0]}x{input_hw[1]} input fits them"
    else:
        plural = "" if fit.prefix_tokens == 1 else "s"
        advice = f"a {fit.grid[0]}x{fit.grid[1]} grid fits ({fit.prefix_tokens} prefix token{plural})"
    raise LayoutError(f"{where} has {tokens} tokens; {problem}; {advice}")


def _guess_prefix(tokens: int, input_hw: tuple[int, int]) -> Layout | None:
    """Without a usable hint, the prefix count whose grid best follows the input's aspect.

    Taking the smallest prefix that factorises at all is wrong for register
    tokens: 1 class + 4 registers on a 16x16 grid (261 tokens at 224x224) also
    factorise as 1 prefix + a 13x20 grid. Ties go to the fewer prefix tokens.
    """
    best: tuple[float, Layout] | None = None
    for prefix in range(MAX_PREFIX_TOKENS + 1):
        grid = _token_grid(tokens - prefix, input_hw)
        if grid is None:
            continue
        error = _aspect_error(grid, input_hw)
        if best is None or error < best[0] - 1e-9:
            best = (error, Layout(LayoutKind.NLC, grid, prefix))
    return best[1] if best else None
