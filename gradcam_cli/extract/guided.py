"""Guided backpropagation without touching the model.

Springenberg et al., "Striving for Simplicity: The All Convolutional Net",
ICLR 2015 workshop (arXiv:1412.6806): at every ReLU, only positive gradients
flow back to positive inputs. Guided Grad-CAM (Selvaraju et al., ICCV 2017)
multiplies that input-level image by the Grad-CAM map.

How: a TorchFunctionMode sees every activation the forward runs, whether an
`nn.ReLU` module (in-place or not), `F.relu`, `torch.relu` or `Tensor.relu`,
and puts a gradient hook on its output. The hook keeps only positive
gradients, and only while the input-gradient pass runs, so the Grad-CAM pass
through the same graph is unchanged. No module is replaced (the reference
swaps ReLU modules and misses functional ones); the hooks die with the graph.

GELU, SiLU, ReLU6 and leaky ReLU get the same rule (negative incoming
gradients dropped before the activation's own derivative), so transformer
and mobile networks get a guided image too rather than a plain gradient.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from collections.abc import Iterator

import torch

from gradcam_cli.vocab import Norm
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

if TYPE_CHECKING:
    from gradcam_cli.maps import CamOptions


def _activation_functions() -> set[Any]:

    return {
        F.relu,
        F.relu_,
        torch.relu,
        torch.relu_,
        torch.Tensor.relu,
        torch.Tensor.relu_,
        F.relu6,
        F.leaky_relu,
        F.leaky_relu_,
        F.gelu,
        F.silu,
    }


class GuidedBackprop:
    """Guided hooks on the activations of the forward run inside `guided_backprop(True)`."""

    def __init__(self) -> None:
        self.active = False

    def hook(self, grad: torch.Tensor) -> torch.Tensor | None:
        return grad.clamp(min=0) if self.active else None

    def input_gradient(self, score: torch.Tensor, inputs: torch.Tensor | None, retain_graph: bool) -> torch.Tensor:
        """d(score)/d(input) with the guided rule at every activation: (N, 3, H, W)."""
        assert inputs is not None and inputs.requires_grad
        self.active = True
        try:
            (grad,) = torch.autograd.grad(score, inputs, retain_graph=retain_graph)
        finally:
            self.active = False
        return grad.detach()

    @staticmethod
    def combine(cam: torch.Tensor, backprop: torch.Tensor, options: CamOptions) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Grad-CAM (N, H, W) x guided backprop (N, 3, H, W) → pixel map, blank flags, RGB image.

        The pixel map is the largest magnitude over the colour channels, the
        usual way to show an input-level attribution as one heat map.
        """
        from gradcam_cli.maps import normalise

        image = cam[:, None].to(backprop.dtype) * backprop
        pixel = image.abs().amax(dim=1)
        scaled, blank = normalise(pixel)
        return (scaled if options.norm is Norm.minmax else pixel), blank, image


@contextmanager
def guided_backprop(enabled: bool) -> Iterator[GuidedBackprop | None]:
    """Inside: activations of any forward get guided hooks (when enabled). Outside: nothing remains."""
    if not enabled:
        yield None
        return

    guide = GuidedBackprop()
    functions = _activation_functions()

    class _Mode(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            if func in functions and getattr(out, "requires_grad", False):
                out.register_hook(guide.hook)
            return out

    with _Mode():
        yield guide
