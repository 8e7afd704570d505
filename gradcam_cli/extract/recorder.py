"""Activations by forward hooks, gradients by one torch.autograd.grad.

Why not module backward hooks: they break on in-place ops, fire for every
use of a shared module and compute gradients nobody needs. Asking autograd
for d(score)/d(layer output) directly stops the backward pass at the target
layers and never touches parameter `.grad`.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

from gradcam_cli.errors import LayerError
from gradcam_cli.model.state import eval_mode, first_tensor, frozen_parameters

import torch
from torch import nn

if TYPE_CHECKING:
    from gradcam_cli.layers.paths import ResolvedLayer


class LayerRecorder:
    """Context manager: hooks on the target layers while inside, the model as found after.

    The hook hands a clone downstream, so an in-place op after the target
    layer (ReLU(inplace=True), `x += ...`) cannot corrupt the saved output.
    The graph starts at the first target layer (parameters frozen, the input
    not requiring grad) unless `input_grad` asks for the gradient at the input.
    With `graph=False` (gradient-free methods) the forward builds no graph at
    all. With `strict=False` (whole-network methods hooking many layers) layers
    that never ran or do not feed the score are skipped instead of refused.
    """

    def __init__(
        self,
        model: nn.Module,
        layers: list[ResolvedLayer],
        model_name: str = "the model",
        *,
        graph: bool = True,
        strict: bool = True,
        input_grad: bool = False,
    ) -> None:
        self.model = model
        self.layers = layers
        self.model_name = model_name
        self.graph = graph
        self.strict = strict
        self.input_grad = input_grad
        self.outputs: dict[str, torch.Tensor] = {}
        self.input: torch.Tensor | None = None
        self._handles: list[Any] = []
        self._stack = ExitStack()

    def __enter__(self) -> LayerRecorder:

        try:
            for layer in self.layers:
                self._handles.append(layer.module.register_forward_hook(self._hook_for(layer.name)))
            self._stack.enter_context(eval_mode(self.model))
            if self.graph:
                # explanations need a graph even when the caller sits in no_grad or inference_mode
                self._stack.enter_context(torch.inference_mode(False))
                self._stack.enter_context(torch.enable_grad())
                self._stack.enter_context(frozen_parameters(self.model))
            else:
                self._stack.enter_context(torch.inference_mode())
        except BaseException:
            self._cleanup()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._cleanup()

    def _cleanup(self) -> None:
        self._stack.close()
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self.outputs.clear()
        self.input = None

    def _hook_for(self, name: str) -> Any:
        def hook(_module: nn.Module, _inputs: Any, output: Any) -> Any:
            tensor = first_tensor(output)
            if tensor is None:
                return None
            if self.graph and not tensor.requires_grad and tensor.is_leaf and tensor.is_floating_point():
                tensor.requires_grad_(True)  # the graph starts here (see frozen_parameters)
            self.outputs[name] = tensor  # a reused module keeps its last call
            if not tensor.requires_grad:
                return None
            copy = tensor.clone()
            if isinstance(output, tuple):
                return (copy, *output[1:])
            if isinstance(output, list):
                return [copy, *output[1:]]
            return copy

        return hook

    def forward(self, x: torch.Tensor) -> Any:
        """Run the model on its own copy of the input; the input requires grad only when its gradient is asked for.

        A forward that changes its input in place (`x.mul_(...)`) then changes neither the caller's tensor (which
        the masked forwards and the augmented views are made from) nor the leaf the input gradient is taken at.
        What the forward returns is the task's to read (cams/targets.py: Targets.read).
        """
        self.outputs.clear()
        self.input = x.detach().requires_grad_(self.input_grad) if self.graph else x
        output = self.model(self.input.clone())
        missing = [layer.name for layer in self.layers if layer.name not in self.outputs]
        if missing and self.strict:
            raise LayerError(
                f"layer '{missing[0]}' never ran in the forward pass of {self.model_name} "
                f"(it is defined but unused); pick another with: gradcam layers {self.model_name}"
            )
        return output

    def activations(self) -> list[torch.Tensor]:
        return [self.outputs[layer.name].detach() for layer in self.layers]

    def ran_layers(self) -> list[ResolvedLayer]:
        """The hooked layers whose output the last forward recorded and that carry a graph."""
        return [layer for layer in self.layers if layer.name in self.outputs and self.outputs[layer.name].requires_grad]

    def recorded_input(self) -> torch.Tensor:
        """The input of the last forward, as the graph saw it (`input_grad=True` makes it require a gradient)."""
        if self.input is None:
            raise RuntimeError("no forward has run through this recorder yet")
        return self.input

    def gradients_with_input(self, score: torch.Tensor, retain_graph: bool) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """d(score)/d(input) and d(score)/d(output) of each of `ran_layers()`, in one backward pass.

        A layer the score does not depend on gets a zero gradient (non-strict use).
        """
        ran = self.ran_layers()
        outputs = [self.recorded_input()] + [self.outputs[layer.name] for layer in ran]
        grads = torch.autograd.grad(score, outputs, retain_graph=retain_graph, allow_unused=True)
        filled = [torch.zeros_like(o) if g is None else g.detach() for o, g in zip(outputs, grads)]
        return filled[0], filled[1:]

    def gradients_per_rank(self, scores: torch.Tensor, retain_graph: bool, batched: bool = True) -> list[list[torch.Tensor]]:
        """For each column k of `scores` (N, K): the gradients of its sum at every target layer.

        One batched backward (autograd's vmap over K one-hot output gradients)
        instead of K passes; a model with an op that has no batching rule falls
        back to one pass per class, with the same result. `batched=False` asks for one pass per column at once
        (targets whose backward is cheap on its own, a detector's).
        """
        import warnings

        n, k = scores.shape
        if k == 1:
            return [self.gradients(scores[:, 0].sum(), retain_graph)]
        outputs = [self.outputs[layer.name] for layer in self.layers]
        if batched and all(o.requires_grad for o in outputs) and scores.requires_grad:
            one_hot = torch.eye(k, dtype=scores.dtype, device=scores.device)[:, None, :].expand(k, n, k)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # vmap's performance notes are not the user's business
                    grads = torch.autograd.grad(
                        scores, outputs, grad_outputs=one_hot, is_grads_batched=True, retain_graph=True, allow_unused=True
                    )
                if all(g is not None for g in grads):
                    return [[g[i].detach() for g in grads] for i in range(k)]
            except RuntimeError:
                pass  # no batching rule for some op: one pass per class below
        return [self.gradients(scores[:, i].sum(), retain_graph=retain_graph or i + 1 < k) for i in range(k)]

    def gradients(self, score: torch.Tensor, retain_graph: bool) -> list[torch.Tensor]:
        """d(score)/d(each target layer's output); no parameter gradient is computed."""
        outputs = [self.outputs[layer.name] for layer in self.layers]
        unused = [layer for layer, output in zip(self.layers, outputs) if not output.requires_grad]
        if not unused and score.requires_grad:
            grads = torch.autograd.grad(score, outputs, retain_graph=retain_graph, allow_unused=True)
            unused = [layer for layer, grad in zip(self.layers, grads) if grad is None]
        else:
            unused = unused or list(self.layers)  # nothing the score came from required grad
        if unused:
            raise LayerError(
                f"the target score does not depend on layer '{unused[0].name}' of {self.model_name}; "
                "pick a layer the classifier's output is computed from"
            )
        return [g.detach() for g in grads]
