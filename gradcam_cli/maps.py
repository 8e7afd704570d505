"""Maps as tensors: the options, the result of a batch, and the maths every method's map goes through.

Below layers/, extract/ and cams/ (it imports only `geometry.resize` and the
vocabulary): the runners in `cams/engine.py`, the method modules, guided
backpropagation, the masked forwards and the augmented views all share these
pieces without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable, Sequence

from gradcam_cli.errors import UsageError
from gradcam_cli.geometry import resize
from gradcam_cli.vocab import Combine, Norm

import torch
from torch import nn

EPSILON = 1e-7


# progress(what, done, total): long per-batch work (masked forwards) reports here
ProgressFn = Callable[[str, int, int], None]


@dataclass(frozen=True, kw_only=True)
class CamOptions:
    """How maps are post-processed, and the knobs of the costlier methods."""

    relu: bool = True
    norm: Norm = Norm.minmax  # minmax: each map in [0, 1]; none: the raw values
    combine: Combine = Combine.mean  # how several layers' maps are merged
    eigen_smooth: bool = False  # reduce channels by the first principal component
    aug_smooth: bool = False  # average over flips and rescalings (see augment.py)
    cam_batch_size: int = 32  # masked/ablated forwards per pass (scorecam, ablationcam)
    precision: torch.dtype | None = None  # autocast dtype of the model's passes; the CAM maths stay fp32
    negative: bool = False  # explain minus the class score: what pushes it down (a binary classifier's other class)
    progress: ProgressFn | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "norm", member_of(Norm, "norm", self.norm))  # a plain string from a Python caller
        object.__setattr__(self, "combine", member_of(Combine, "combine", self.combine))
        if self.cam_batch_size < 1:
            raise UsageError(f"cam_batch_size {self.cam_batch_size}: must be 1 or more")


def member_of(enum: type[Norm] | type[Combine], name: str, value: object) -> Any:
    """A choice given as text (a Python caller's "none") as its enum member, or one clear UsageError."""
    try:
        return enum(value)
    except ValueError:
        raise UsageError(f"{name} must be one of {', '.join(m.value for m in enum)}, not {value!r}") from None


@dataclass(kw_only=True)
class CamBatch:
    """Maps (N, K, H, W) at the input size, with what was explained; a clip's or a volume's (N, K, T, H, W).

    `maps` are in [0, 1] with norm "minmax", raw values with norm "none".
    `guided` holds the guided-backprop x CAM images (N, K, 3, H, W) of
    guided methods, else None.
    """

    maps: torch.Tensor
    blank: torch.Tensor  # (N, K) bool: nothing survived the ReLU / a flat map
    finite: torch.Tensor  # (N,) bool: scores and gradients were finite
    logits: torch.Tensor  # (N, classes)
    targets: torch.Tensor  # (N, K) class indices
    guided: torch.Tensor | None = None
    chosen: torch.Tensor | None = None  # (N, K) bool: which ranks are explained (⟨multilabel⟩: each image its own labels)
    found: list[Any] | None = None  # per image, what the task found in it (a detector's boxes); None for a classifier

    def ranks(self, row: int) -> list[int]:
        """The target ranks explained for one image: all K, or with ⟨multilabel⟩ its labels above the threshold."""
        every = range(int(self.targets.shape[1]))
        return list(every) if self.chosen is None else [k for k in every if bool(self.chosen[row, k])]

    def to_cpu(self) -> CamBatch:
        """One transfer per batch, so writer threads never touch the device."""
        from dataclasses import replace

        return replace(
            self,
            maps=self.maps.cpu(),
            blank=self.blank.cpu(),
            finite=self.finite.cpu(),
            logits=self.logits.cpu(),
            targets=self.targets.cpu(),
            guided=None if self.guided is None else self.guided.cpu(),
            chosen=None if self.chosen is None else self.chosen.cpu(),
            found=None if self.found is None else [_on_cpu(part) for part in self.found],
        )


def _on_cpu(part: Any) -> Any:
    """A task's finding (a dataclass of tensors, or one tensor) moved to the CPU."""
    if isinstance(part, torch.Tensor):
        return part.cpu()
    move = getattr(part, "cpu", None)
    return move() if callable(move) else part


@dataclass(frozen=True, kw_only=True)
class NetworkGradients:
    """What a whole-network method (FullGrad) receives for one target rank."""

    inputs: torch.Tensor  # (N, 3, H, W) the input batch
    input_grad: torch.Tensor  # d(score)/d(input)
    layers: list[tuple[nn.Module, torch.Tensor]]  # (module, d(score)/d(its output)) for each hooked layer
    eigen_smooth: bool = False


def normalise(maps: torch.Tensor, dims: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-map min-max to [0, 1] over the last `dims` dims (a clip's map: 3); a flat map is blank and becomes zeros, never NaN.

    Flatness is judged relative to the map's own magnitude, not in absolute
    terms: a CAM scales with the score, and models with small gradients at the
    layer (LayerScale ViTs such as timm's test_vit2 give spans near 1e-8) still
    have a real pattern. An all-zero map (nothing survived the ReLU) stays blank.
    """
    flat = maps.flatten(start_dim=-dims)
    tail = (Ellipsis,) + (None,) * dims  # the map's dims back, as ones
    low = flat.min(dim=-1).values[tail]
    high = flat.max(dim=-1).values[tail]
    span = high - low
    blank = (span <= EPSILON * torch.maximum(high.abs(), low.abs())).flatten(start_dim=-dims).squeeze(-1)
    scaled = (maps - low) / span.masked_fill(span <= 0, 1.0)
    scaled = scaled.masked_fill(blank[tail], 0.0)
    return scaled.clamp_(0.0, 1.0), blank


def combine_layers(per_layer: Sequence[torch.Tensor], how: str) -> torch.Tensor:
    """Several layers' maps (each N×H×W or N×T×H×W, same size) → one."""
    if len(per_layer) == 1:
        return per_layer[0]
    stacked = torch.stack(list(per_layer))
    if how == "max":
        return stacked.amax(dim=0)
    if how == "product":
        return stacked.prod(dim=0)
    if how == "sum":
        return stacked.sum(dim=0)
    return stacked.mean(dim=0)


def finish_maps(raw_per_layer: Sequence[torch.Tensor], size: tuple[int, ...], options: CamOptions) -> tuple[torch.Tensor, torch.Tensor]:
    """Raw layer maps → one map per image, and whether it is blank; `size` (H, W), or (T, H, W) for a clip or a volume.

    Each layer is normalised at its own resolution, before upsampling: bilinear
    upsampling shaves a peak by an amount that depends on the layer's stride, so
    normalising afterwards would weigh coarse layers by an interpolation artefact.
    This is also pytorch-grad-cam's order, so multi-layer maps match the reference. `sum` adds the raw maps
    instead: a level that carries little of the score's gradient then adds little, not a normalised [0, 1] of noise.
    """
    dims = len(size)
    per_layer = []
    for raw in raw_per_layer:
        if options.relu:
            raw = raw.clamp(min=0)
        if options.norm is Norm.minmax and options.combine is not Combine.sum:  # sum: raw maps, normalised once below
            raw = normalise(raw, dims)[0]
        per_layer.append(resize(raw, size))  # half-pixel bilinear (trilinear for 3-D), as cv2.resize: maps match the reference
    combined = combine_layers(per_layer, options.combine)
    scaled, blank = normalise(combined, dims)
    return (scaled if options.norm is Norm.minmax else combined), blank


def finite_rows(*tensors: torch.Tensor) -> torch.Tensor:
    """(N,) bool: every value of each image's row is finite, in all the tensors."""
    finite = None
    for t in tensors:
        rows = t.flatten(start_dim=1).isfinite().all(dim=1)
        finite = rows if finite is None else finite & rows
    assert finite is not None
    return finite


def probabilities(logits: torch.Tensor, multilabel: bool = False) -> torch.Tensor:
    """Class probabilities of logits (..., classes): softmax; a single logit (a binary classifier) or
    independent labels (⟨multilabel⟩) each their sigmoid."""
    logits = logits.float()
    return logits.sigmoid() if multilabel or logits.shape[-1] == 1 else logits.softmax(dim=-1)
