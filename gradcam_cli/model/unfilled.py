"""Building a model whose weights will be loaded, without filling its parameters first.

Random initialisation is thrown away the moment weights are loaded, and it is
not free: timm's `trunc_normal_` over a ViT-B's 86 million parameters takes
longer than the forward and backward of an image. So while a hub builds a model
that will take weights, every in-place write to a parameter (`normal_`,
`uniform_`, `trunc_normal_`'s steps, `torch.nn.init.*`) is skipped: the
parameter keeps the memory it was allocated with, to be overwritten by the load.
Copies into a parameter (a load's `copy_`) still run and are recorded.

Only parameters are left so, never buffers or other tensors a builder computes
(a batch norm's running variance, a position index), and only where the weights
then reach every parameter: `--weights` loads strictly (model/checkpoint.py names
what a checkpoint misses), and a hub's own pretrained load must have copied into
each parameter, or the model is built again the ordinary way (a new head that
the hub left to its initialisation, say).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

# In-place methods that change what a parameter is (its shape, its autograd flag, its storage), not its values.
KEPT = frozenset(
    {
        "requires_grad_", "resize_", "resize_as_", "as_strided_", "t_", "transpose_", "squeeze_",
        "unsqueeze_", "swapdims_", "swapaxes_", "share_memory_", "detach_",
    }
)  # fmt: skip
WRITES = frozenset({"copy_", "set_"})  # a load's writes: run, and the parameter counted as filled


class _UnfilledParameters(TorchFunctionMode):
    """While active: in-place value writes to a parameter are skipped; the parameters copied into are remembered."""

    def __init__(self) -> None:
        super().__init__()
        self.written: set[int] = set()

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name.endswith("_") and not name.endswith("__"):
            target = next((value for value in (*args, *kwargs.values()) if isinstance(value, torch.Tensor)), None)
            if isinstance(target, nn.Parameter):
                if name in WRITES:
                    self.written.add(id(target))
                elif name not in KEPT:
                    return target
        return func(*args, **kwargs)


def built_unfilled(build: Callable[[], nn.Module], loads_weights: bool) -> nn.Module | None:
    """What `build` makes, its parameters left unfilled; `loads_weights`: the build itself loads weights (a hub's
    pretrained ones), which must then have reached every parameter, or None is returned (build it again, filled).

    Without `loads_weights` the caller loads every parameter itself, strictly.
    """
    with _UnfilledParameters() as mode:
        model = build()
    if loads_weights and any(id(parameter) not in mode.written for parameter in model.parameters()):
        return None
    if not loads_weights and not parameters_in_state(model):
        return None
    return model


def parameters_in_state(model: nn.Module) -> bool:
    """Whether a state dict carries every parameter (a module may leave one out of its own state dict)."""
    kept = set(model.state_dict(keep_vars=True))
    return all(name in kept for name, _ in model.named_parameters(remove_duplicate=False))
