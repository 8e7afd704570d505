"""The user's own code as a model hub: `path/to/net.py:build` or `package.module:build`.

Most users explain a network they wrote. The name says where it is: a Python
file or an importable module, a colon, then a callable that returns an
`nn.Module` (a class, a factory function) or a module instance, by its
(dotted) name in that file. This runs the user's code, at their explicit
request; every way it can fail (no such file, not Python, no such name, an
exception inside it, something that is not a module) is one line that says
which. Such a model has no data config: the preprocessing options give it,
else ImageNet's statistics at 224x224 are assumed and said. Its default layer
is the probe-forward rule's, its class names come from ⟨labels⟩.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from gradcam_cli.errors import GradcamError, ModelError, UsageError, printable
from gradcam_cli.model.faults import fault_line
from gradcam_cli.model.data_config import IMAGENET_MEAN, IMAGENET_STD, DataConfig, default_input_hw
from gradcam_cli.values import CODE_MODEL

from torch import nn

NO_DATA_CONFIG = (
    "{name} comes with no preprocessing: assuming ImageNet's {assumed}; set it with ⟨input_size⟩, ⟨mean⟩, ⟨std⟩, "
    "⟨interpolation⟩ and ⟨crop_pct⟩"
)
ASSUMED = {  # DataConfig's field → what is assumed without it
    "input_hw": "224x224 input",
    "mean": "mean 0.485,0.456,0.406",
    "std": "std 0.229,0.224,0.225",
    "interpolation": "bilinear resize",
}


class CodeHub:
    """Models built by the user's own Python code."""

    name = "code"
    builds_unfilled = False  # the user's builder may read its parameters while building; it runs as written

    def arch_of(self, name: str) -> str | None:
        """The whole name when it reads `file.py:attr` or `module:attr`; else another hub's."""
        return name if CODE_MODEL.match(name.strip()) else None

    def downloads(self, arch: str, pretrained: bool) -> bool:
        return False  # whatever the user's code fetches, it fetches itself

    def build(self, arch: str, pretrained: bool, num_classes: int | None, kwargs: Mapping[str, Any] | None = None) -> nn.Module:
        """Import the file or module, find the name, call it with the kwargs (and num_classes when it takes one)."""
        match = CODE_MODEL.match(arch.strip())
        if match is None:
            raise UsageError(f"⟨model={arch}⟩ is not `path/to/file.py:name` or `package.module:name`")
        module = _import(match["where"])
        target = _attribute(module, match["attr"], match["where"])
        return _instantiate(target, arch, dict(kwargs or {}), num_classes)

    def weights_location(self, arch: str) -> tuple[str, str] | None:
        return None

    def data_config(self, model: nn.Module, arch: str) -> DataConfig:
        """ImageNet's statistics at the input size the module declares (224x224 when it declares none)."""
        return DataConfig(input_hw=default_input_hw(model), mean=IMAGENET_MEAN, std=IMAGENET_STD)

    def data_config_notice(self, arch: str, given: frozenset[str]) -> str | None:
        """Only what is assumed: a run given ⟨input_size⟩ is not told that 224x224 is assumed."""
        missing = [field for field in ASSUMED if field not in given]
        if {"input_hw", "mean", "std"} <= given or not missing:
            return None
        return NO_DATA_CONFIG.format(name=arch, assumed=", ".join(ASSUMED[field] for field in missing))

    def class_names(self, model: nn.Module, arch: str, num_classes: int) -> list[str] | None:
        return None

    def default_layer(self, model: nn.Module, arch: str) -> str | None:
        return None  # the probe-forward rule's

    def stage_layers(self, model: nn.Module, arch: str) -> list[str] | None:
        return None

    def num_prefix_tokens(self, model: nn.Module, arch: str) -> int | None:
        return None


@contextlib.contextmanager
def _importable_from(folder: Path) -> Iterator[None]:
    """The folder on sys.path while the user's code is imported (its own imports of siblings work), then not."""
    entry = str(folder)
    sys.path.insert(0, entry)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(entry)


def _import(where: str) -> ModuleType:
    """A .py file by its path, or a module by its dotted name (importable from the current folder too)."""
    if where.endswith(".py"):
        path = Path(where).expanduser()
        if not path.is_file():
            raise UsageError(f"⟨model⟩: no such file {printable(where)}", hint="give path/to/file.py:name, the file relative to here")
        name = f"gradcam_user_{abs(hash(str(path.resolve())))}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise UsageError(f"⟨model⟩: {printable(where)} cannot be imported as Python")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # as importlib's recipe: dataclasses and pickling in the user's code look it up
        with _importable_from(path.resolve().parent):
            try:
                _run_user_code(lambda: spec.loader.exec_module(module), f"importing {printable(where)}")
            except BaseException:
                sys.modules.pop(name, None)
                raise
        return module
    with _importable_from(Path(os.getcwd())):
        try:
            return _run_user_code(lambda: importlib.import_module(where), f"importing {where}", missing=where)
        except ModuleNotFoundError as error:
            raise UsageError(
                f"⟨model⟩: no module named {error.name or where}", hint="give path/to/file.py:name, or install the package"
            ) from None


def _run_user_code(call: Any, doing: str, missing: str | None = None) -> Any:
    """Run the user's code; what it raises becomes one line naming where in their code it happened."""
    try:
        return call()
    except ModuleNotFoundError as error:
        if missing is not None and error.name is not None and (missing == error.name or missing.startswith(error.name + ".")):
            raise  # the module named is not there (not one it imports)
        raise ModelError(f"⟨model⟩: {doing} failed: {fault_line(error)}") from None
    except SyntaxError as error:
        where = f"{Path(error.filename or '?').name}, line {error.lineno}" if error.lineno else "it"
        raise UsageError(f"⟨model⟩: {doing} failed: it is not valid Python ({where}: {error.msg})") from None
    except (KeyboardInterrupt, GradcamError):  # Ctrl-C while it runs (a stop request) is no fault of the code
        raise
    except BaseException as error:  # noqa: BLE001 - the user's code may raise anything, sys.exit() too; they get one line
        raise ModelError(f"⟨model⟩: {doing} failed: {fault_line(error)}") from None


def _attribute(module: ModuleType, dotted: str, where: str) -> Any:
    target: Any = module
    for part in dotted.split("."):
        if not hasattr(target, part):
            names = sorted(n for n in vars(module) if not n.startswith("_") and _buildable(getattr(module, n)))
            offer = f"; it has {', '.join(names[:8])}" if names else ""
            raise UsageError(f"⟨model⟩: {printable(where)} has no {dotted!r}{offer}")
        target = getattr(target, part)
    return target


def _buildable(value: Any) -> bool:
    return isinstance(value, nn.Module) or inspect.isfunction(value) or (inspect.isclass(value) and issubclass(value, nn.Module))


def _instantiate(target: Any, arch: str, kwargs: dict[str, Any], num_classes: int | None) -> nn.Module:
    """A module instance as it is; a class or factory called with the kwargs; anything else refused."""
    if isinstance(target, nn.Module):
        if kwargs:
            raise UsageError(f"⟨model={arch}⟩ is a module instance: it takes no ⟨model_kwargs⟩")
        return target
    if not callable(target):
        raise UsageError(f"⟨model={arch}⟩ is of type {type(target).__name__}: neither a module nor something that builds one")
    if num_classes is not None and "num_classes" not in kwargs and _takes(target, "num_classes"):
        kwargs["num_classes"] = num_classes  # a checkpoint with another head: built to fit it
    built = _run_user_code(lambda: target(**kwargs), f"calling {arch}")
    if not isinstance(built, nn.Module):
        raise UsageError(f"⟨model={arch}⟩ returned an object of type {type(built).__name__}, not a torch.nn.Module")
    return built


def _takes(target: Any, name: str) -> bool:
    try:
        parameters = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return False
    return name in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())


CODE = CodeHub()
