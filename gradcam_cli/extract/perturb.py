"""Many forwards without a graph, for the gradient-free methods (Score-CAM, Ablation-CAM).

Every (image, channel) pair needs one forward of a perturbed copy. The pairs
are flattened across the whole batch and run `batch_size` at a time, so the
device stays busy however few images there are, and only one chunk of
perturbed inputs ever exists: memory stays flat however many channels the
layer has (the reference builds all N x C masked images at once).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from collections.abc import Callable, Iterator

from gradcam_cli.model.state import eval_mode, first_tensor

import torch

from gradcam_cli.vocab import LayoutKind
from torch import nn

if TYPE_CHECKING:
    from gradcam_cli.maps import ProgressFn
    from gradcam_cli.layers.paths import ResolvedLayer
from gradcam_cli.layout import Layout

# (image indices (B,), channel indices (B,)) → the B inputs to score
InputMaker = Callable[["torch.Tensor", "torch.Tensor"], "torch.Tensor"]


@dataclass(kw_only=True)
class LayerProbe:
    """What a gradient-free method may ask of the model, for one layer and one target rank."""

    model: nn.Module
    x: torch.Tensor  # (N, 3, H, W) the batch being explained
    layer: ResolvedLayer
    layout: Layout
    output: torch.Tensor  # the layer's output as the model produced it (any layout)
    activations: torch.Tensor  # the same as N×C×h×w float
    logits: torch.Tensor  # (N, classes) of the unperturbed batch
    classes: torch.Tensor  # (N,) the class explained for each image
    batch_size: int
    progress: ProgressFn | None = None
    method_name: str = "perturbation"
    sign: float = 1.0  # -1: the score explained is minus the class score (⟨negative⟩)
    # a target that is no logit (a detection found again in a masked image): each row's score from the forward's result
    read_scores: Callable[[Any, torch.Tensor], torch.Tensor] | None = None

    @property
    def num_channels(self) -> int:
        return int(self.activations.shape[1])

    def target_scores(self) -> torch.Tensor:
        """(N,) each image's score for its class, unperturbed."""
        return self.sign * self.logits.gather(1, self.classes[:, None])[:, 0].float()

    def scores_of_inputs(self, make_inputs: InputMaker) -> torch.Tensor:
        """(N, C): the class score of the input `make_inputs` builds for each (image, channel)."""
        with _quiet_model(self.model):
            return self._scores(lambda images, channels: self.model(make_inputs(images, channels)))

    def scores_with_channel_ablated(self) -> torch.Tensor:
        """(N, C): each image's class score when one channel of the layer's output is set to zero.

        The layer's output is replaced by a forward hook (the model is never
        edited); layers before it still run, as in the reference.
        """
        chunk: dict[str, Any] = {}

        def replace(_module: nn.Module, _inputs: Any, output: Any) -> Any:
            ablated = self._ablated(chunk["images"], chunk["channels"])
            return ablated if not isinstance(output, (tuple, list)) else type(output)((ablated, *output[1:]))

        def run(images: torch.Tensor, channels: torch.Tensor) -> Any:
            chunk["images"], chunk["channels"] = images, channels
            return self.model(self.x[images])

        handle = self.layer.module.register_forward_hook(replace)
        try:
            with _quiet_model(self.model):
                return self._scores(run)
        finally:
            handle.remove()

    def _ablated(self, images: torch.Tensor, channels: torch.Tensor) -> torch.Tensor:
        """The recorded output of `images`, with channel `channels[j]` of row j zeroed."""
        out = self.output[images].clone()
        rows = torch.arange(len(images), device=out.device)
        if self.layout.kind is LayoutKind.NCHW:
            out[rows, channels] = 0
        else:  # channels last: NHWC, or NLC tokens (every token, prefix ones included)
            moved = out.movedim(-1, 1)
            moved[rows, channels] = 0
        return out

    def _scores(self, forward: Callable[[torch.Tensor, torch.Tensor], Any]) -> torch.Tensor:

        n, c = int(self.x.shape[0]), self.num_channels
        scores = torch.empty(n * c, dtype=torch.float32, device=self.x.device)
        for start, images, channels in self._chunks(n, c):
            out = forward(images, channels)
            scores[start : start + len(images)] = self.sign * self._target(out, images)
            if self.progress:
                self.progress(f"{self.method_name} {self.layer.name}", start + len(images), n * c)
        return scores.reshape(n, c)

    def _target(self, out: Any, images: torch.Tensor) -> torch.Tensor:
        """Each row's score in a forward's result: its image's class logit, or the target's own reading."""
        if self.read_scores is not None:
            return self.read_scores(out, images).float()
        logits = first_tensor(out.logits if hasattr(out, "logits") else out)
        assert logits is not None
        return logits.gather(1, self.classes[images][:, None])[:, 0].float()

    def _chunks(self, n: int, c: int) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:

        for start in range(0, n * c, self.batch_size):
            flat = torch.arange(start, min(start + self.batch_size, n * c), device=self.x.device)
            yield start, flat // c, flat % c


@contextmanager
def _quiet_model(model: nn.Module) -> Iterator[None]:
    """Eval mode and no graph for the extra forwards; the model's flags restored after."""
    with eval_mode(model), torch.inference_mode():
        yield


@dataclass(frozen=True)
class PerturbationCost:
    """What a gradient-free method will cost per image, measured before the run starts."""

    channels: dict[str, int]  # layer name → channels, one masked forward each
    seconds_per_forward: float  # one image's forward, measured at the method's chunk size

    @property
    def forwards_per_image(self) -> int:
        return sum(self.channels.values())

    @property
    def seconds_per_image(self) -> float:
        return self.forwards_per_image * self.seconds_per_forward


def measure_cost(model: nn.Module, layers: list[ResolvedLayer], x: torch.Tensor) -> PerturbationCost:
    """One timed forward of `x` (a chunk of blank inputs) with the target layers' output shapes recorded.

    Channels are where the layer's own type puts them (dim 1 for conv-like
    modules and 4-D maps, the last dim for tokens and channels-last modules).
    """
    import time

    from gradcam_cli.layout import channels_dim_hint

    channels: dict[str, int] = {}

    def hook_for(layer: ResolvedLayer) -> Callable[..., None]:
        def record(module: nn.Module, _inputs: Any, output: Any) -> None:
            tensor = first_tensor(output)
            if tensor is not None and tensor.dim() >= 3:
                dim = channels_dim_hint(module) or (1 if tensor.dim() == 4 else -1)
                channels[layer.name or "(model)"] = int(tensor.shape[dim])

        return record

    handles = [layer.module.register_forward_hook(hook_for(layer)) for layer in layers]
    try:
        with eval_mode(model), torch.inference_mode(), _quiet_model(model):
            model(x[:1])  # warm-up: the first call of a model pays one-off setup costs
            start = time.perf_counter()
            model(x)
            if x.device.type == "cuda":
                torch.cuda.synchronize(x.device)
            elapsed = time.perf_counter() - start
    finally:
        for handle in handles:
            handle.remove()
    return PerturbationCost(channels, elapsed / max(1, x.shape[0]))
