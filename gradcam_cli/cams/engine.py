"""From a batch of input tensors to maps: the heart of every run.

One runner per method kind (see `methods.MethodKind`), then the same finish for
all: channels reduced (sum, or first principal component), ReLU, per-layer
normalisation, upsampling, layers combined, renormalised. Kept free of files
and images so the Python API and the CLI share it.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any
from collections.abc import Sequence

from gradcam_cli.errors import UsageError
from gradcam_cli.extract.recorder import LayerRecorder
from gradcam_cli.layout import Layout, LayoutHints, channels_dim_hint, patch_grid, target_layout
from gradcam_cli.layout_3d import Layout3d, LayoutHints3d, channels_dim_hint_3d, map_layer_of, mvit_token_grid, target_layout_3d
from gradcam_cli.maps import CamBatch, CamOptions, NetworkGradients, finish_maps, finite_rows
from gradcam_cli.cams.methods import MethodKind
from gradcam_cli.cams.methods.projection import first_component
from gradcam_cli.cams.targets import Reading, TargetChoice

import torch
from torch import nn

if TYPE_CHECKING:
    from gradcam_cli.layers.paths import ResolvedLayer
    from gradcam_cli.cams.methods import CamMethod
    from gradcam_cli.cams.targets import Targets


@dataclass(kw_only=True)
class _Job:
    """One batch to explain, and everything the runners share about it."""

    model: nn.Module
    x: torch.Tensor
    layers: Sequence[ResolvedLayer]
    method: CamMethod
    targets: Targets
    options: CamOptions
    hints: LayoutHints
    model_name: str

    @property
    def size(self) -> tuple[int, ...]:
        """The maps' size: an image's (H, W), a clip's or a volume's (T, H, W)."""
        return tuple(int(s) for s in self.x.shape[2:])

    def layouts(self, activations: Sequence[torch.Tensor]) -> list[Layout | Layout3d]:
        """Each layer's layout; the patch grid is asked for at this input's size (aug-smooth rescales it)."""
        if len(self.size) == 3:
            return self.layouts_3d(activations)
        size = (self.size[0], self.size[1])
        hints = replace(self.hints, patch_grid=patch_grid(self.model, size))
        layouts: list[Layout | Layout3d] = []
        for a, layer in zip(activations, self.layers):
            layer_hints = replace(hints, channels_dim=channels_dim_hint(layer.module))
            layouts.append(target_layout(tuple(a.shape), size, layer_hints, layer.name, self.model_name))
        return layouts

    def layouts_3d(self, activations: Sequence[torch.Tensor]) -> list[Layout | Layout3d]:
        """Each layer's layout for a clip or a volume (layout_3d.py): its module type, the model's token grid."""
        from gradcam_cli.layers.defaults import known_clip_layer

        t, h, w = self.size
        map_layer = known_clip_layer(self.model) or map_layer_of(self.model)  # named if a layer is refused
        found: list[Layout | Layout3d] = []
        for a, layer in zip(activations, self.layers):
            hints = LayoutHints3d(
                channels_dim=channels_dim_hint_3d(layer.module),
                grid=self.hints.grid,
                token_grid=mvit_token_grid(self.model, layer.name) if a.dim() == 3 else None,
                map_layer=map_layer,
            )
            found.append(target_layout_3d(tuple(a.shape), (t, h, w), hints, layer.name, self.model_name))
        return found

    def scored(self, scores: torch.Tensor) -> torch.Tensor:
        """The scores explained: the class scores, or with ⟨negative⟩ minus them."""
        return -scores if self.options.negative else scores

    def autocast(self) -> contextlib.AbstractContextManager[object]:
        """Mixed precision for the model's forward passes when asked for (backward follows the forward's dtypes)."""
        if self.options.precision is None:
            return contextlib.nullcontext()
        return torch.autocast(self.x.device.type, dtype=self.options.precision)

    def reduce(self, contributions: torch.Tensor) -> torch.Tensor:
        """Channel contributions (N, C, h, w) → raw map (N, h, w); a clip's (N, C, t, h, w) → (N, t, h, w)."""
        if self.method.projection or self.options.eigen_smooth:
            return first_component(contributions)
        return contributions.sum(dim=1)

    def read(self, output: object) -> Reading:
        """What the forward's result says to explain (the task's reading), its scores as the maps explain them."""
        reading = self.targets.read(output, self.model_name)
        return replace(reading, scores=self.scored(reading.scores.float()))


def _stack(job: _Job, maps: list[torch.Tensor], blanks: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-rank maps (N, H, W) and flags (N,) → (N, K, H, W) and (N, K); a batch with nothing to explain has K = 0."""
    if not maps:
        n = int(job.x.shape[0])
        return job.x.new_zeros((n, 0, *job.size)), torch.zeros((n, 0), dtype=torch.bool, device=job.x.device)
    return torch.stack(maps, dim=1).nan_to_num_(0.0), torch.stack(blanks, dim=1)


def _batch(job: _Job, reading: Reading, maps: list[torch.Tensor], blanks: list[torch.Tensor], finite: torch.Tensor) -> CamBatch:
    """The maps with what the reading says they explain."""
    maps_t, blanks_t = _stack(job, maps, blanks)
    return CamBatch(
        maps=maps_t, blank=blanks_t, finite=finite, logits=reading.logits.detach(), targets=reading.targets,
        chosen=reading.chosen, found=reading.found,
    )  # fmt: skip


def _run_gradient(job: _Job) -> CamBatch:
    """One forward with a graph, then the gradients of every target rank, stopping at the layers."""
    from gradcam_cli.extract.guided import guided_backprop

    method = job.method
    with (
        LayerRecorder(job.model, list(job.layers), job.model_name, input_grad=method.guided) as recorder,
        guided_backprop(method.guided) as guide,
    ):
        with job.targets.forwarding(job.model), job.autocast():
            reading = job.read(recorder.forward(job.x))
        scores = reading.scores
        activations = recorder.activations()
        layouts = job.layouts(activations)
        finite = finite_rows(reading.logits.detach(), *activations)
        batched = getattr(job.targets, "batched", True)  # a detector's ranks: one backward each (cams/detections.py)
        per_rank = recorder.gradients_per_rank(scores, retain_graph=method.guided, batched=batched) if scores.shape[1] else []
        maps, blanks, guided = [], [], []
        for k, gradients in enumerate(per_rank):
            finite &= finite_rows(*gradients)
            raws = [
                job.reduce(method.gradient_cam()(layout.to_nchw(a).float(), layout.to_nchw(g).float()))
                for a, g, layout in zip(activations, gradients, layouts)
            ]
            cam, blank = finish_maps(raws, job.size, job.options)
            if guide is not None:
                backprop = guide.input_gradient(scores[:, k].sum(), recorder.input, retain_graph=k + 1 < len(per_rank))
                finite &= finite_rows(backprop)
                cam, blank, image = guide.combine(cam, backprop, job.options)
                guided.append(image)
            maps.append(cam)
            blanks.append(blank)
    batch = _batch(job, reading, maps, blanks, finite)
    batch.guided = torch.stack(guided, dim=1) if guided else None
    return batch


def _perturbation_raws(
    job: _Job,
    activations: list[torch.Tensor],
    grids: list[torch.Tensor],
    layouts: list[Layout | Layout3d],
    reading: Reading,
    rank: int,
) -> list[torch.Tensor]:
    """Raw maps per layer of a gradient-free method that weighs channels by extra forwards (an image's: refuse_3d)."""
    read_scores, forwarding = job.targets.perturbed(reading, rank, job.model)
    # a target that reads its own scores (a detector's) keeps its (N, K) scores in `logits`: rank k is column k
    classes = reading.targets[:, rank] if read_scores is None else torch.full_like(reading.targets[:, rank], rank)
    raws = []
    with forwarding:
        for layer, raw, layout, grid in zip(job.layers, activations, layouts, grids):
            assert isinstance(layout, Layout)  # a clip's layer never gets here: refuse_3d
            raws.append(_layer_raw(job, layer, raw, layout, grid, reading.logits, classes, read_scores))
    return raws


def _layer_raw(
    job: _Job, layer: ResolvedLayer, raw: torch.Tensor, layout: Layout, grid: torch.Tensor, logits: torch.Tensor,
    classes: torch.Tensor, read_scores: Any,
) -> torch.Tensor:  # fmt: skip
    """One layer's raw map of a masked-forward method."""
    from gradcam_cli.extract.perturb import LayerProbe

    probe = LayerProbe(
        model=job.model,
        x=job.x,
        layer=layer,
        layout=layout,
        output=raw,
        activations=grid,
        logits=logits,
        classes=classes,
        batch_size=job.options.cam_batch_size,
        progress=job.options.progress,
        method_name=job.method.name,
        sign=-1.0 if job.options.negative else 1.0,
        read_scores=read_scores,
    )
    with job.autocast():
        weights = job.method.perturbation_cam()(probe).float()
    return job.reduce(weights[:, :, None, None] * grid)


def _run_forward_only(job: _Job) -> CamBatch:
    """Gradient-free methods: one forward that builds no graph, then the method's own forwards, if any."""
    with torch.inference_mode():
        with (
            LayerRecorder(job.model, list(job.layers), job.model_name, graph=False) as recorder,
            job.autocast(),
            job.targets.forwarding(job.model),
        ):
            reading = job.read(recorder.forward(job.x))
            activations = recorder.activations()
        logits, chosen = reading.logits, reading.targets
        layouts = job.layouts(activations)
        finite = finite_rows(logits, *activations)
        grids = [layout.to_nchw(a).float() for a, layout in zip(activations, layouts)]
        if job.method.kind is MethodKind.ACTIVATION:  # the same map for every class
            compute = job.method.activation_cam()
            cam, blank = finish_maps([job.reduce(compute(g, None)) for g in grids], job.size, job.options)
            per_rank = [(cam, blank)] * chosen.shape[1]
        else:
            per_rank = [
                finish_maps(_perturbation_raws(job, activations, grids, layouts, reading, k), job.size, job.options)
                for k in range(chosen.shape[1])
            ]
        return _batch(job, reading, [m for m, _ in per_rank], [b for _, b in per_rank], finite)


def _run_network(job: _Job) -> CamBatch:
    """Whole-network methods: gradients at the input and at every layer the method picks."""
    hooked = job.method.network_layers(job.model)  # type: ignore[misc]
    with LayerRecorder(job.model, hooked, job.model_name, strict=False, input_grad=True) as recorder:
        with job.targets.forwarding(job.model), job.autocast():
            reading = job.read(recorder.forward(job.x))
        ranks = reading.scores.shape[1]
        finite = finite_rows(reading.logits.detach())
        maps, blanks = [], []
        for k in range(ranks):
            score = reading.scores[:, k].sum()
            input_grad, gradients = recorder.gradients_with_input(score, retain_graph=k + 1 < ranks)
            finite &= finite_rows(input_grad, *gradients)
            ran = recorder.ran_layers()
            network = NetworkGradients(
                inputs=recorder.recorded_input().detach(),
                input_grad=input_grad,
                layers=[(layer.module, g) for layer, g in zip(ran, gradients)],
                eigen_smooth=job.options.eigen_smooth,
            )
            cam, blank = finish_maps([job.method.network_cam()(network)], job.size, job.options)
            maps.append(cam)
            blanks.append(blank)
    return _batch(job, reading, maps, blanks, finite)


_RUNNERS = {
    MethodKind.GRADIENT: _run_gradient,
    MethodKind.ACTIVATION: _run_forward_only,
    MethodKind.PERTURBATION: _run_forward_only,
    MethodKind.NETWORK: _run_network,
}


def compute_cams(
    model: nn.Module,
    x: torch.Tensor,
    layers: Sequence[ResolvedLayer],
    method: CamMethod,
    targets: Targets,
    *,
    options: CamOptions | None = None,
    num_prefix_tokens: int | None = None,
    grid: tuple[int, int] | None = None,
    model_name: str = "the model",
) -> CamBatch:
    """Maps at the input tensor's size for each image and target rank; one call at a time per model (`model_lock`)."""
    options = options or CamOptions()
    if x.dim() == 5:
        refuse_3d(method, options)
    hints = LayoutHints(num_prefix_tokens=num_prefix_tokens, grid=grid)
    job = _Job(model=model, x=x, layers=layers, method=method, targets=targets, options=options, hints=hints, model_name=model_name)
    with model_lock(model):
        if options.aug_smooth:
            from gradcam_cli.cams.augment import smoothed

            assert isinstance(targets, TargetChoice)  # the tasks refuse ⟨aug_smooth⟩ where the targets are no classes
            return smoothed(lambda x_aug, choice, view: _run_once(_in_view(job, view), x_aug, choice), x, targets, options)
        return _run_once(job, x, targets)


def refuse_3d(method: CamMethod, options: CamOptions) -> None:
    """What cannot map a clip or a volume honestly yet: one line, before any forward."""
    what = None
    if method.kind in (MethodKind.PERTURBATION, MethodKind.NETWORK) or method.guided:
        what = f"method '{method.name}'"
    elif options.aug_smooth:
        what = "⟨aug_smooth⟩ (its flips and rescalings are an image's)"
    if what is not None:
        raise UsageError(
            f"{what} does not map a clip or a volume (a 5-D input) yet; use gradcam, hirescam, gradcam++, xgradcam, "
            "layercam, gradcam-elementwise, eigencam or eigengradcam"
        )


def _run_once(job: _Job, x: torch.Tensor, targets: Targets) -> CamBatch:
    return _RUNNERS[job.method.kind](replace(job, x=x, targets=targets))


def _in_view(job: _Job, view: str) -> _Job:
    """The job of one augmented view: its progress says which view the masked forwards are at."""
    progress = job.options.progress
    if progress is None:
        return job

    def report(what: str, done: int, total: int) -> None:
        progress(f"{view}: {what}", done, total)

    return replace(job, options=replace(job.options, progress=report))


_LOCKS: weakref.WeakKeyDictionary[nn.Module, threading.RLock] = weakref.WeakKeyDictionary()
_LOCKS_GUARD = threading.Lock()


def model_lock(model: nn.Module) -> threading.RLock:
    """The model's own lock: a pass sets its modes, hooks and `requires_grad` flags and restores them after.

    Two passes on one model at once (threads of a Python caller) would see each other's hooks and restore
    each other's flags; holding this lock makes them take turns. One lock per model object, dropped with it.
    """
    with _LOCKS_GUARD:
        lock = _LOCKS.get(model)
        if lock is None:
            lock = _LOCKS[model] = threading.RLock()
        return lock
