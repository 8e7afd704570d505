"""The model as found: its modes and flags set for a pass and restored after, and what its modules return.

A leaf (no import from the package): the layer probe, the extractor and the
masked forwards all put the model in a state and must leave it as they found it.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any
from collections.abc import Iterator

import torch
from torch import nn


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    """Eval mode inside; every module's own train/eval flag restored after.

    Per module, not just the root: `model.train(flag)` would undo a fine-tuning
    setup such as a train-mode model with frozen (eval) BatchNorm.
    """
    modes = [(module, module.training) for module in model.modules()]
    try:
        model.eval()
        yield
    finally:
        for module, training in modes:
            module.training = training


@contextmanager
def frozen_parameters(model: nn.Module) -> Iterator[None]:
    """No parameter requires grad inside; every flag restored after.

    Then autograd saves nothing for weight gradients and, with an input that
    does not require grad either, the graph starts at the first target layer:
    the forward keeps no activations below it and the backward stops there.
    """
    flags = [(p, p.requires_grad) for p in model.parameters()]
    try:
        for p, _ in flags:
            p.requires_grad_(False)
        yield
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)


def first_tensor(output: Any) -> torch.Tensor | None:
    """The tensor a module produced (tuple outputs such as (x, attn) give their first)."""
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    return None


@contextmanager
def switched_on(flag: ContextVar[bool]) -> Iterator[None]:
    """A context flag on inside (this thread or task only), as it was after: a detector family's opened postprocessing."""
    token = flag.set(True)
    try:
        yield
    finally:
        flag.reset(token)
