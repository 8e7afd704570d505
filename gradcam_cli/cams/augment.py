"""`--aug-smooth`: test-time augmentation, each map mapped back before averaging.

The batch is explained as given, mirrored, zoomed in and zoomed out (and the
mirror of each zoom). Zooms keep the input size, so models with fixed position
embeddings (ViT) accept every view: zooming in crops the centre and enlarges
it, zooming out shrinks the image onto a zero (mean-colour) border. Every map
is brought back to the original view; where a zoomed-in view does not cover a
pixel it does not vote, and its vote fades in towards its edges (no seam). Every view explains the classes chosen on the
unaugmented view, so a flip cannot switch the explained class.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from collections.abc import Callable

from gradcam_cli.geometry import resize
from gradcam_cli.cams.targets import FixedTargets

import torch

from gradcam_cli.vocab import Norm

if TYPE_CHECKING:
    from gradcam_cli.maps import CamBatch, CamOptions
    from gradcam_cli.cams.targets import TargetChoice

SCALES = (1.0, 1.1, 0.9)


@dataclass(frozen=True)
class View:
    flip: bool
    scale: float

    def box(self, h: int, w: int) -> tuple[int, int, int, int]:
        """(top, left, height, width) of the region that zooming exchanges with the full frame."""
        bh = max(1, round(h / self.scale)) if self.scale > 1 else max(1, round(h * self.scale))
        bw = max(1, round(w / self.scale)) if self.scale > 1 else max(1, round(w * self.scale))
        return (h - bh) // 2, (w - bw) // 2, bh, bw

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        """(N, C, H, W) → the view, same size."""
        h, w = x.shape[-2:]
        if self.scale != 1.0:
            top, left, bh, bw = self.box(h, w)
            if self.scale > 1:
                x = resize(x[..., top : top + bh, left : left + bw], (h, w))
            else:
                canvas = torch.zeros_like(x)
                canvas[..., top : top + bh, left : left + bw] = resize(x, (bh, bw))
                x = canvas
        return x.flip(-1) if self.flip else x

    @property
    def label(self) -> str:
        """How the view differs from the image, as the progress line says it."""
        zoom = "" if self.scale == 1.0 else "zoomed in" if self.scale > 1 else "zoomed out"
        words = [w for w in (zoom, "mirrored" if self.flip else "") if w]
        return ", ".join(words) or "as given"

    def undo(self, maps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Maps (N, K, H, W) of the view → maps of the original frame, and where they hold (H, W)."""
        h, w = maps.shape[-2:]
        if self.flip:
            maps = maps.flip(-1)
        covered = torch.ones((h, w), dtype=maps.dtype, device=maps.device)
        if self.scale == 1.0:
            return maps, covered
        top, left, bh, bw = self.box(h, w)
        if self.scale < 1:
            return resize(maps[..., top : top + bh, left : left + bw], (h, w)), covered
        back = torch.zeros_like(maps)
        back[..., top : top + bh, left : left + bw] = resize(maps, (bh, bw))
        covered = torch.zeros_like(covered)
        covered[top : top + bh, left : left + bw] = _feathered(bh, bw, maps.dtype, maps.device)
        return back, covered


def _feathered(h: int, w: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A weight of 1 inside, falling linearly to 0 at the edges over a tenth of the size.

    A hard-edged vote would leave a visible seam where the zoomed-in views stop
    counting; a ramp blends them in.
    """
    ramp = max(1.0, 0.1 * min(h, w))

    def edge(n: int) -> torch.Tensor:
        i = torch.arange(n, dtype=dtype, device=device)
        return (torch.minimum(i + 0.5, n - i - 0.5) / ramp).clamp(max=1.0)

    return edge(h)[:, None] * edge(w)[None, :]


VIEWS = tuple(View(flip, scale) for scale in SCALES for flip in (False, True))


def _named(view: View) -> str:
    return f"view {VIEWS.index(view) + 1} of {len(VIEWS)} ({view.label})"


def smoothed(
    run: Callable[[torch.Tensor, TargetChoice | FixedTargets, str], CamBatch],
    x: torch.Tensor,
    targets: TargetChoice,
    options: CamOptions,
) -> CamBatch:
    """The average of the maps of every view, renormalised; the rest from the unaugmented view.

    `run(x, targets, view)` explains one view; `view` names it (`view 2 of 6 (mirrored)`) for the progress line.
    """
    from dataclasses import replace

    from gradcam_cli.maps import normalise

    first = run(x, targets, _named(VIEWS[0]))
    fixed = FixedTargets(first.targets)
    total = first.maps.float().clone()
    votes: torch.Tensor | float = 1.0
    finite = first.finite.clone()
    for view in VIEWS[1:]:
        batch = run(view.apply(x), fixed, _named(view))
        maps, covered = view.undo(batch.maps.float())
        total += maps * covered
        votes = votes + covered
        finite &= batch.finite
    mean = total / votes
    scaled, blank = normalise(mean)
    return replace(first, maps=scaled if options.norm is Norm.minmax else mean, blank=blank, finite=finite)
