"""The stages of a model, in forward order: one target layer per stage, for `gradcam compare --layers stages`.

A stage is where the network works at one resolution; its last module is the
map a stage hands on. Each hub knows its own models' stages (model/hub.py:
ModelSource.stage_layers: timm's `feature_info`, a torchvision table); a model
no hub knows gets the probe-forward rule: the outermost module that finishes
each run of outputs at one spatial size. A hub's name that is no module of the
model (timm's metadata has such bugs) is left out with a notice, not a failure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from gradcam_cli.errors import LayerError
from gradcam_cli.layers.paths import never_runs, resolve_layer, run_by
from gradcam_cli.layers.tree import spatial_sizes
from gradcam_cli.model.data_config import default_input_hw
from gradcam_cli.model.hub import SOURCES

from torch import nn

OPEN_AT_SIZES = 3  # a child whose children work at this many resolutions or more holds stages, not one
MAPS_INSIDE = 2  # a child with no map of its own holds stages when the maps inside it span this many resolutions

if TYPE_CHECKING:
    from gradcam_cli.model.hub import ModelSource


def stage_paths(
    model: nn.Module,
    arch: str = "",
    source: ModelSource | None = None,
    notice: Callable[[str], None] | None = None,
    *,
    input_hw: tuple[int, int] | None = None,
) -> list[str]:
    """One dotted layer path per stage, in forward order; the model's own hub first, then the registry, then the probe.

    Paths are canonical (`blocks.11.norm1`, not `blocks.-1.norm1`) and each module comes once. `input_hw`: the size
    the probe forward runs at, the run's own (⟨input_size⟩); None: the size the model declares, else 224x224.
    """
    hubs = SOURCES if source is None else (source, *SOURCES)
    for hub in dict.fromkeys(hubs):  # each hub asked once
        named = hub.stage_layers(model, arch)
        if not named:
            continue
        paths = _modules_of(model, named, hub.name, notice or (lambda _m: None))
        if paths:
            return paths
    paths = probed_stages(model, input_hw)
    if not paths:
        raise LayerError("no layer of this model outputs a spatial map, so it has no stages to sweep; name the layers with ⟨layers⟩")
    return paths


def _modules_of(model: nn.Module, named: list[str], hub: str, notice: Callable[[str], None]) -> list[str]:
    """The names that are modules of the model, canonical and once each (a ModuleList: its last child, which runs);
    the others said once and left out."""
    found: list[str] = []
    missing: list[str] = []
    for name in named:
        try:
            path = run_by(resolve_layer(model, name, type(model).__name__)).name
        except LayerError:
            missing.append(name)
            continue
        if path and path not in found:
            found.append(path)
    if missing:
        kept = f"; sweeping {', '.join(found)}" if found else "; finding the stages by a probe forward instead"
        notice(f"{hub} names stage layers that are no module of this model ({', '.join(missing)}), left out{kept}")
    return found


def probed_stages(model: nn.Module, input_hw: tuple[int, int] | None = None) -> list[str]:
    """The probe-forward rule: the outermost modules at which the spatial size changes, in forward order.

    The root's children are taken in the order they finished, and a child is
    opened into its own children (and so on down) when it holds several
    stages: its children work at three resolutions or more (a `features`
    Sequential), it never runs itself (a ModuleList the forward loops over),
    or it outputs no map while maps at two resolutions or more are made
    inside it (a featurizer that pools and flattens, as DomainBed's
    `nn.Sequential(Featurizer, Linear)`, however deep the backbone sits in it).
    Of each run of these at one size, the last is the stage (a container
    finishes after its children). When that finds nothing, a child with no map
    of its own is opened for maps at one resolution too. Token grids count as maps;
    a module that runs more than once (a shared activation) is no stage.
    """
    sizes = spatial_sizes(model, input_hw or default_input_hw(model), once=True)
    order = {name: index for index, name in enumerate(sizes)}
    found = _opened(model, "", sizes, order, MAPS_INSIDE) or _opened(model, "", sizes, order, 1)
    stages: list[str] = []
    size = None
    for name in found:
        if sizes[name] != size:
            stages.append(name)
            size = sizes[name]
        else:
            stages[-1] = name
    return stages


def _opened(module: nn.Module, prefix: str, sizes: dict, order: dict[str, int], inside: int) -> list[str]:
    """The module's children with a spatial output, in finishing order; a child whose own children span
    OPEN_AT_SIZES resolutions, that never runs itself, or that outputs no map while its modules make maps at `inside`
    resolutions or more, is replaced by them (and so on down)."""
    names = []
    for child_name, child in module.named_children():
        name = f"{prefix}{child_name}"
        own = {sizes[f"{name}.{n}"] for n, _ in child.named_children() if f"{name}.{n}" in sizes}
        within = {sizes[f"{name}.{n}"] for n, _ in child.named_modules() if n and f"{name}.{n}" in sizes}
        if len(own) >= OPEN_AT_SIZES or (name not in sizes and (never_runs(child) or len(within) >= inside)):
            names += _opened(child, f"{name}.", sizes, order, inside)
        elif name in sizes:
            names.append(name)
    return sorted(names, key=order.__getitem__)
