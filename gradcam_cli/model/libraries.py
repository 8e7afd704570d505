"""timm and torchvision imported without torch's compiler, which a run never uses.

Importing torchvision (and so timm, which builds on it) imports `torch._dynamo`,
torch.compile's tracer: `torchvision.ops.roi_align` takes one function from it at
import time, and timm decorates a few functions with `torch.compiler.disable`
when its modules load. That is 1.5 to 2 s of a one-image run on a 2-core machine,
a third of it, for a compiler nothing here calls.

So while these two libraries import, `torch._dynamo` stands deferred: the one
function torchvision takes, and every `disable` decoration timm makes, reach the
real compiler when first called, which imports it then (timm's disabled functions
belong to its NaFlex ViTs; roi_align is a detector's). Anything else that asks for
the compiler during the import gets the real one at once, as before. Once the
libraries are in, nothing is left standing in: `import torch._dynamo` and
`torch.compile` work as they always do. Only timm keeps the deferred `disable`
it found (as `timm.layers.disable_compiler`): a function it decorates later is
likewise disabled when first called.

timm also tries `import wandb` when it loads (timm.utils.summary, for its training
scripts' logging): with the `wandb` extra installed that is hundreds of modules in
every run. While timm imports, wandb is held back (timm catches the ImportError); a
later `import wandb` works as usual, and one already imported is left alone.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import sys
import threading
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch

from gradcam_cli.timings import stamp

DYNAMO = "torch._dynamo"
DYNAMO_UTILS = "torch._dynamo.utils"


def import_timm() -> types.ModuleType:
    """`import timm`, with the compiler deferred (timm imports torchvision)."""
    with _compiler_deferred(), _wandb_held_back():
        import timm
    stamp("imports")
    return timm


@contextlib.contextmanager
def _wandb_held_back() -> Iterator[None]:
    """`import wandb` raises ImportError inside, unless wandb is imported already (then nothing changes)."""
    if "wandb" in sys.modules:
        yield
        return
    sys.modules["wandb"] = None  # type: ignore[assignment]  # Python's own "import halted" marker
    try:
        yield
    finally:
        if sys.modules.get("wandb", 0) is None:
            del sys.modules["wandb"]


def import_torchvision() -> types.ModuleType:
    """`import torchvision`, with the compiler deferred."""
    with _compiler_deferred():
        import torchvision
    stamp("imports")
    return torchvision


class _StandIn(types.ModuleType):
    """`torch._dynamo` (or its `utils`) until something asks for more than the import needs: then the real one."""

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        _remove_stand_ins()
        return getattr(importlib.import_module(self.__name__), attribute)


def _remove_stand_ins() -> None:
    for name in (DYNAMO_UTILS, DYNAMO):
        if isinstance(sys.modules.get(name), _StandIn):
            del sys.modules[name]
    if isinstance(vars(torch).get("_dynamo"), _StandIn):
        delattr(torch, "_dynamo")  # torch imports the real one lazily when `torch._dynamo` is next read


def _is_compile_supported(*args: Any, **kwargs: Any) -> Any:
    """torch._dynamo.utils.is_compile_supported, imported on the first call (roi_align asks it at run time)."""
    return importlib.import_module(DYNAMO_UTILS).is_compile_supported(*args, **kwargs)


def _deferred_disable(original: Callable[..., Any]) -> Callable[..., Any]:
    """torch.compiler.disable that wraps a function now and asks the compiler when the function is first called."""

    def disable(fn: Callable[..., Any] | None = None, *args: Any, **kwargs: Any) -> Any:
        if fn is None:  # used as @disable(recursive=False)
            return lambda function: disable(function, *args, **kwargs)
        disabled: list[Callable[..., Any]] = []

        @functools.wraps(fn)
        def call(*call_args: Any, **call_kwargs: Any) -> Any:
            if not disabled:
                disabled.append(original(fn, *args, **kwargs))
            return disabled[0](*call_args, **call_kwargs)

        return call

    return disable


_deferring = threading.RLock()  # two threads loading models at once (the Python API) take turns here


@contextlib.contextmanager
def _compiler_deferred() -> Iterator[None]:
    """While the block imports, `torch._dynamo` is a stand-in; afterwards, nothing of it is left."""
    with _deferring:
        compiler = getattr(torch, "compiler", None)
        original = getattr(compiler, "disable", None)
        if DYNAMO in sys.modules or original is None:  # already paid for, or a torch without torch.compiler
            yield
            return
        with _stand_ins(compiler, original):
            yield


@contextlib.contextmanager
def _stand_ins(compiler: Any, original: Callable[..., Any]) -> Iterator[None]:
    """`torch._dynamo` and its `utils` as stand-ins and a deferred `torch.compiler.disable`, for the block."""
    package = _StandIn(DYNAMO)
    package.__path__ = []  # a package, so `torch._dynamo.utils` can be found under it
    utils = _StandIn(DYNAMO_UTILS)
    utils.is_compile_supported = _is_compile_supported  # type: ignore[attr-defined]
    sys.modules[DYNAMO], sys.modules[DYNAMO_UTILS] = package, utils
    compiler.disable = _deferred_disable(original)
    try:
        yield
    finally:
        compiler.disable = original
        _remove_stand_ins()
