"""Target layers: dotted paths with negative indices, defaults per family, the tree.

Users name layers the way they read them in `print(model)`: `layer4.1.conv1`,
`blocks.-1.norm1`, `encoder.layers.encoder_layer_11.ln_1`. A wrong step fails
with the children that do exist there, so nobody has to guess.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING
from collections.abc import Callable

from gradcam_cli.errors import LayerError, printable

if TYPE_CHECKING:
    from torch import nn

# torchvision families whose last spatial map is not found by the generic rule
# (or where the generic rule picks a worse layer); first matching prefix wins.
TORCHVISION_DEFAULTS: tuple[tuple[str, str], ...] = (
    ("vit_", "encoder.layers.-1.ln_1"),
    ("swin_", "features.-1"),
    ("maxvit_", "blocks.-1"),
    ("resnet", "layer4"),
    ("resnext", "layer4"),
    ("wide_resnet", "layer4"),
    ("regnet_", "trunk_output"),
    ("vgg", "features"),
    ("alexnet", "features"),
    ("densenet", "features"),
    ("squeezenet", "features"),
    ("mobilenet_", "features.-1"),
    ("efficientnet_", "features.-1"),
    ("convnext_", "features.-1"),
    ("mnasnet", "layers.-1"),
    ("shufflenet_", "conv5"),
    ("googlenet", "inception5b"),
    ("inception_v3", "Mixed_7c"),
)


INDEX = re.compile(r"-?[0-9]+")  # a child index as users type it: 1, -1


@dataclass(frozen=True)
class ResolvedLayer:
    """A layer found in a model: its canonical dotted name and the module."""

    path: str
    name: str
    module: nn.Module


def _child_names(module: nn.Module) -> list[str]:
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
    module, parts = model, []
    for token in path.split("."):
        found = _step(module, token)
        if found is None:
            raise _not_found(path, token, ".".join(parts), module, model_name)
        parts.append(found[0])
        module = found[1]
    return ResolvedLayer(path=path, name=".".join(parts), module=module)


def resolve_layers(model: nn.Module, paths: list[str], model_name: str = "the model") -> list[ResolvedLayer]:
    resolved = [resolve_layer(model, p, model_name) for p in paths]
    seen: set[str] = set()
    unique = []
    for layer in resolved:
        if layer.name not in seen:
            seen.add(layer.name)
            unique.append(layer)
    return unique


def _is_timm_vit_like(model: nn.Module) -> bool:
    blocks = getattr(model, "blocks", None)
    if blocks is None or getattr(model, "num_prefix_tokens", 0) < 1:
        return False
    try:
        last = list(blocks.children())[-1]
    except (IndexError, AttributeError, TypeError):
        return False
    return hasattr(last, "norm1")


def _timm_default(model: nn.Module) -> str | None:
    if _is_timm_vit_like(model):
        # With a class token the last block's patch tokens get no gradient:
        # the input of the last block's attention still carries them.
        return "blocks.-1.norm1"
    info = getattr(model, "feature_info", None)
    if info:
        last = info[-1] if isinstance(info, list) else None
        if last is None and hasattr(info, "get_dicts"):
            last = info.get_dicts()[-1]
        if isinstance(last, dict) and last.get("module"):
            return str(last["module"])
    return None


def _torchvision_default(arch: str) -> str | None:
    for prefix, path in TORCHVISION_DEFAULTS:
        if arch.startswith(prefix):
            return path
    return None


def default_layer_paths(model: nn.Module, arch: str = "", source: str = "timm") -> list[str]:
    """The layer a careful user would pick: last spatial map the head still sees."""
    path = _torchvision_default(arch) if source == "torchvision" else _timm_default(model)
    if path is None:
        path = _torchvision_default(arch) or _timm_default(model)
    if path is None:
        path = _last_spatial_module(model)
    return [path]


def _last_spatial_module(model: nn.Module) -> str:
    """Fallback: the outermost module that last produced a 4-D map in a probe forward."""
    from gradcam_cli.model.load import default_input_hw

    shapes = probe_shapes(model, default_input_hw(model))
    # forward hooks fire when a module ends, so a stage comes after its last conv
    spatial = [name for name, shape in shapes.items() if name and len(shape) == 4 and min(shape[-2:]) > 1]
    if not spatial:
        raise LayerError("no layer of this model outputs a spatial map; name one with --layer")
    return spatial[-1]


def probe_shapes(model: nn.Module, input_hw: tuple[int, int]) -> dict[str, tuple[int, ...]]:
    """Output shape of every module in one no-grad forward, in the order modules last finished."""
    import torch

    from gradcam_cli.model.state import eval_mode, first_tensor

    shapes: dict[str, tuple[int, ...]] = {}

    def hook_for(name: str) -> Callable[..., None]:
        def hook(_m: nn.Module, _i: object, out: object) -> None:
            tensor = first_tensor(out)
            if tensor is not None:
                shapes.pop(name, None)  # re-insert: a reused module counts at its last call
                shapes[name] = tuple(tensor.shape)

        return hook

    handles = [module.register_forward_hook(hook_for(name)) for name, module in model.named_modules()]
    try:
        with eval_mode(model), torch.no_grad():
            model(torch.zeros(1, 3, *input_hw))
    finally:
        for handle in handles:
            handle.remove()
    return shapes


@dataclass(frozen=True)
class LayerRow:
    """One module in `gradcam layers`: where it is, what it outputs, whether it is the default."""

    name: str
    type_name: str
    depth: int
    shape: tuple[int, ...] | None
    layout: str | None
    is_default: bool


def layer_rows(
    model: nn.Module,
    input_hw: tuple[int, int],
    default_names: list[str],
    num_prefix_tokens: int | None = None,
) -> list[LayerRow]:
    """Every module with the output shape and layout seen in one probe forward.

    Layouts are read as a run reads them (same hints, patch grid included),
    so the table shows the grid `explain` will use.
    """
    from gradcam_cli.errors import LayoutError
    from gradcam_cli.layout import LayoutHints, channels_dim_hint, detect_layout, patch_grid

    shapes = probe_shapes(model, input_hw)
    patches = patch_grid(model, input_hw)
    rows = []
    for name, module in model.named_modules():
        shape = shapes.get(name)
        layout = None
        if shape is not None and len(shape) in (3, 4) and name:
            try:
                hints = LayoutHints(num_prefix_tokens, None, channels_dim_hint(module), patches)
                layout = detect_layout(shape, input_hw, hints).describe()
            except LayoutError:
                layout = "?"
        depth = name.count(".") + 1 if name else 0
        rows.append(LayerRow(name or "(model)", type(module).__name__, depth, shape, layout, name in default_names))
    return rows
