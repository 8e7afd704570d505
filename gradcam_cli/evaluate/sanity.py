"""The model-parameter randomisation test: do a method's maps change when the model they explain is destroyed?

Adebayo et al. 2018, "Sanity Checks for Saliency Maps": re-initialise the
network cascading from the head down and compare each method's maps with the
trained model's. A method whose maps survive (still alike when the weights
that made the decision are noise) shows the image, an edge detector would do
as well, not the model. The cascade goes one stage at a time, the steps a
reader can name (a resnet50 module by module would be 107 steps of noise),
on one deep copy: the caller's model is never touched. The stages are
compare's (layers/stages.py: the hub's, else the probe rule, however deep a
wrapper holds the network).
"""

from __future__ import annotations

import copy
from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from gradcam_cli.errors import LayerError, UsageError
from gradcam_cli.evaluate.agreement import spearman, ssim
from gradcam_cli.layers.paths import resolve_layer
from gradcam_cli.model.state import eval_mode

Agreement = tuple[torch.Tensor, torch.Tensor]  # one method's (Spearman, SSIM) at one step, (N,) each
INIT_STD = 0.02  # timm's ViT init for parameters no module knows how to reset (cls_token, pos_embed, LayerScale gamma)


@dataclass(frozen=True)
class CascadeStep:
    """One step of the cascade: `name` is "head", a stage's path, or "stem"; `modules` what it re-initialises."""

    name: str
    modules: tuple[str, ...]


@dataclass(frozen=True)
class SanityResult:
    """Per method, (S, N) agreement of each step's maps with the trained model's (after step i, steps 0..i are random)."""

    steps: list[str]
    spearman: dict[str, torch.Tensor]
    ssim: dict[str, torch.Tensor]


def _owns_parameters(module: nn.Module) -> bool:
    return any(p is not None for p in module._parameters.values())


def _start_order(model: nn.Module, x: torch.Tensor, stages: list[str]) -> tuple[dict[str, int], dict[str, int]]:
    """One probe forward: when each parametered module (and stage) first starts, and when each stage first finishes."""
    modules = dict(model.named_modules())
    watched = [name for name, m in modules.items() if _owns_parameters(m)] + stages
    starts: dict[str, int] = {}
    ends: dict[str, int] = {}
    clock = iter(range(1 << 62))

    def stamp(times: dict[str, int], name: str) -> Callable[..., None]:
        def hook(*_args: object) -> None:  # returns None: the module's inputs and outputs go on unchanged
            if name not in times:
                times[name] = next(clock)

        return hook

    handles = [modules[name].register_forward_pre_hook(stamp(starts, name)) for name in dict.fromkeys(watched)]
    handles += [modules[name].register_forward_hook(stamp(ends, name)) for name in stages]
    try:
        with eval_mode(model), torch.no_grad():
            model(x[:1].to(_device_of(model)))
    finally:
        for handle in handles:
            handle.remove()
    return starts, ends


def cascade_steps(model: nn.Module, stage_paths: Sequence[str], x: torch.Tensor) -> list[CascadeStep]:
    """The cascade, head first: "head", each stage from the last to the first, then "stem"; steps without parameters left out.

    stage_paths are one module per stage in forward order (layers.stages.
    stage_paths gives them; a stage's last block or its norm1 will do). A probe
    forward of x[:1] times each module that owns parameters by when it starts:
    the head is what starts after the last stage's path finished, stage k what
    starts after stage k-1's finished up to stage k's finishing, the first stage
    its own path's modules, and the stem what starts before it. A container with
    parameters of its own so goes where its forward begins (a ViT's cls_token
    and pos_embed, owned by the root, with the stem). Modules the forward never
    runs (an unused classifier) go with the head, so that the last step leaves
    nothing trained. Each module is in one step.
    """
    stages = list(dict.fromkeys(resolve_layer(model, path, type(model).__name__).name for path in stage_paths))
    if not stages or "" in stages:
        raise UsageError("the cascade needs one module path per stage, none of them the whole model")
    starts, ends = _start_order(model, x, stages)
    never = [path for path in stages if path not in ends]
    if never:
        raise LayerError(f"stage layer {', '.join(never)} never ran in a forward pass, so the cascade cannot be cut there")
    stages.sort(key=ends.__getitem__)
    bounds = [ends[path] for path in stages]
    names = ["stem", *stages, "head"]
    members: dict[str, list[str]] = {name: [] for name in names}
    owners = [name for name, m in model.named_modules() if _owns_parameters(m)]
    for name in sorted(owners, key=lambda n: starts.get(n, 1 << 62)):
        start = starts.get(name)
        if start is None:
            members["head"].append(name)
        elif start < starts[stages[0]]:
            members["stem"].append(name)
        else:
            members[names[1 + bisect_left(bounds, start)]].append(name)
    return [CascadeStep(name, tuple(members[name])) for name in reversed(names) if members[name]]


def _device_of(model: nn.Module) -> torch.device:
    """Where the probe's input goes: the first parameter's (or buffer's) device."""
    tensor: torch.Tensor | None = next(model.parameters(), None)
    if tensor is None:
        tensor = next(model.buffers(), None)
    return tensor.device if tensor is not None else torch.device("cpu")


@contextmanager
def _seeded(model: nn.Module, seed: int) -> Iterator[None]:
    """Inside, the generators the model's parameters draw from seeded; after, every global generator as it was.

    torch.manual_seed would also seed (or, before CUDA starts, queue a seed
    for) every accelerator, some outside the fork: only the CPU's and the
    model's own devices' generators are seeded, and those are the ones forked.
    """
    devices = sorted({p.device for p in model.parameters() if p.device.type != "cpu"}, key=str)
    kinds = {d.type for d in devices}
    if len(kinds) > 1:
        raise UsageError(f"the model is spread over {', '.join(sorted(kinds))}; the cascade forks one accelerator's generators")
    indices = [d.index if d.index is not None else 0 for d in devices]
    with torch.random.fork_rng(devices=indices, device_type=kinds.pop() if kinds else None):  # no devices: the CPU's only
        torch.default_generator.manual_seed(seed)
        for device, index in zip(devices, indices):
            module = torch.get_device_module(device.type)
            generators = getattr(module, "default_generators", None)
            if generators:
                generators[index].manual_seed(seed)
            else:  # a one-device accelerator such as MPS
                module.manual_seed(seed)
        yield


def reinitialise(net: nn.Module, modules: Sequence[str], seed: int) -> None:
    """Fresh weights for these modules, repeatable for a seed: reset_parameters() where a module has one, else N(0, 0.02).

    reset_parameters also resets buffers such as BatchNorm's running
    statistics, as a fresh network has them. Only the parameters a module owns
    itself are drawn here: its children are modules of their own.
    """
    with _seeded(net, seed), torch.no_grad():
        for name in modules:
            module = net.get_submodule(name)
            reset = getattr(module, "reset_parameters", None)
            if callable(reset):
                reset()
                continue
            for parameter in module._parameters.values():
                if parameter is not None:
                    parameter.normal_(0.0, INIT_STD)


def _agreement(original: Mapping[str, torch.Tensor], maps: Mapping[str, torch.Tensor], step: str) -> dict[str, Agreement]:
    """Per method, its Spearman and SSIM with the trained maps (on the CPU, where the result lives)."""
    if set(maps) != set(original):
        raise UsageError(f"maps_of returned methods {sorted(maps)} after the {step} step, but {sorted(original)} for the trained model")
    out = {}
    for method, trained in original.items():
        a, b = trained.detach().float().cpu(), maps[method].detach().float().cpu()
        out[method] = (spearman(a, b), ssim(a, b))
    return out


def cascading_randomisation(
    model: nn.Module,
    x: torch.Tensor,
    stage_paths: Sequence[str],
    maps_of: Callable[[nn.Module], Mapping[str, torch.Tensor]],
    *,
    original: Mapping[str, torch.Tensor] | None = None,
    seed: int = 0,
    on_step: Callable[[str], None] = lambda _name: None,
) -> SanityResult:
    """Re-initialise a copy of `model` step by step, cumulatively, and after each step compare every method's maps.

    maps_of(net) returns each method's maps (N, H, W) computed with `net`; it
    resolves its layers on `net` by their dotted paths, since net is a copy.
    `original` is the trained model's maps if the caller has them; else they
    are maps_of of the copy before any step (the same weights, and the caller's
    model stays untouched even by maps_of's hooks). Step i is drawn with seed
    `seed + i` on forked generators: repeatable, and the caller's random stream
    is left where it was. The copy stays on the model's device and is freed
    at the end. `on_step(name)` is called as each step starts (a progress line).
    """
    net = copy.deepcopy(model)
    try:
        for parameter in net.parameters():
            parameter.grad = None
        steps = cascade_steps(net, stage_paths, x)
        if not steps:
            raise UsageError("the model has no parameters, so there is nothing to randomise")
        trained = dict(original) if original is not None else dict(maps_of(net))
        rows: list[dict[str, Agreement]] = []
        for index, step in enumerate(steps):
            on_step(step.name)
            reinitialise(net, step.modules, seed + index)
            rows.append(_agreement(trained, maps_of(net), step.name))
    finally:
        del net
    return SanityResult(
        steps=[step.name for step in steps],
        spearman={method: torch.stack([row[method][0] for row in rows]) for method in trained},
        ssim={method: torch.stack([row[method][1] for row in rows]) for method in trained},
    )
