"""Target layers as users name them: dotted paths with negative indices.

Users name layers the way they read them in `print(model)`: `layer4.1.conv1`,
`blocks.-1.norm1`, `encoder.layers.encoder_layer_11.ln_1`. A wrong step fails
with the children that do exist there, so nobody has to guess.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from gradcam_cli.errors import LayerError, printable

from torch import nn

INDEX = re.compile(r"-?[0-9]+")  # a child index as users type it: 1, -1


@dataclass(frozen=True)
class ResolvedLayer:
    """A layer found in a model: its canonical dotted name and the module."""

    path: str
    name: str
    module: nn.Module


def _child_names(module: nn.Module) -> list[str]:
    """The names a path step can take, for the message when it takes none."""
    return [name for name, _ in module.named_children()]


def _step(module: nn.Module, token: str) -> tuple[str, nn.Module] | None:
    """One path step: a child's own name first, else an index into the children."""
    children = dict(module.named_children())
    if token in children:
        return token, children[token]
    if not INDEX.fullmatch(token):  # not int(): it takes " 1", "1_0", "+1" and non-ASCII digits
        return None
    index = int(token)
    names = list(children)
    if -len(names) <= index < len(names):
        name = names[index]
        return name, children[name]
    return None


def _not_found(path: str, failed: str, where: str, parent: nn.Module, model_name: str) -> LayerError:
    """The children that do exist where the path went wrong, and the closest one."""
    path, failed = printable(path), printable(failed)
    names = _child_names(parent)
    place = f"children of '{where}'" if where else "children of the root"
    shown = ", ".join(names[:24]) + (f", ... ({len(names) - 24} more)" if len(names) > 24 else "")
    if not names:
        shown = "none (it is a leaf module)"
    close = difflib.get_close_matches(failed, names, n=1, cutoff=0.5)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    count = f"; indices -{len(names)}..{len(names) - 1} also work" if names else ""
    return LayerError(
        f"layer '{path}' not found in {model_name}: no '{failed}' among the {place}: "
        f"{shown}{hint}{count}. List all with: gradcam layers {model_name}"
    )


def resolve_layer(model: nn.Module, path: str, model_name: str = "the model") -> ResolvedLayer:
    """Walk a dotted path; negative indices count from the end of a module's children."""
    path = path.strip()
    # "model" names the root unless a child is called so (wrappers often keep `self.model`)
    if not path or path == "." or (path == "model" and "model" not in model._modules):
        return ResolvedLayer(path=path, name="", module=model)
    module: nn.Module = model
    parts: list[str] = []
    for token in path.split("."):
        found = _step(module, token)
        if found is None:
            raise _not_found(path, token, ".".join(parts), module, model_name)
        parts.append(found[0])
        module = found[1]
    return ResolvedLayer(path=path, name=".".join(parts), module=module)


def resolve_layers(model: nn.Module, paths: list[str], model_name: str = "the model") -> list[ResolvedLayer]:
    """Each path resolved; two paths to one module (layer4 and -1) count once."""
    resolved = [resolve_layer(model, p, model_name) for p in paths]
    seen: set[str] = set()
    unique = []
    for layer in resolved:
        if layer.name not in seen:
            seen.add(layer.name)
            unique.append(layer)
    return unique


def never_runs(module: nn.Module) -> bool:
    """A container with no forward of its own (ModuleList, ModuleDict): the model calls its children, never it."""
    return isinstance(module, (nn.ModuleList, nn.ModuleDict))


def run_by(layer: ResolvedLayer) -> ResolvedLayer:
    """The module that runs for a layer: a ModuleList's last child (and so on down), since the list is never called.

    timm's feature_info names such lists (CoaT's `parallel_blocks` and
    `serial_blocks4`); a hook on one never fires.
    """
    while isinstance(layer.module, nn.ModuleList) and len(layer.module):
        name, module = list(layer.module.named_children())[-1]
        layer = ResolvedLayer(path=f"{layer.path}.-1", name=f"{layer.name}.{name}".lstrip("."), module=module)
    return layer
