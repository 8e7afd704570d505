"""`gradcam layers` and `gradcam methods`: what a user looks up before choosing a --layer and a --method."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from gradcam_cli.cli.console import write_line
from gradcam_cli.cli.explain import command_streams
from gradcam_cli.errors import ExitCode
from gradcam_cli.cli.options import parameter
from gradcam_cli.option_table import BY_NAME
from gradcam_cli.option_words import in_flags
from gradcam_cli.values import parse_input_size, parse_kwarg
from gradcam_cli.vocab import METHOD_NOTES

LAYERS_TABLE_OPTIONS = ("model_kwargs", "input_size", "trust_pickle")  # what builds and probes the model as explain would


def layers(
    ctx: typer.Context,
    model: Annotated[
        str,
        typer.Argument(help="Model name as for explain (timm, hf-hub:, torchvision:, hf:, yolo:, smp:, open_clip:, net.py:build)."),
    ],
    depth: Annotated[int | None, typer.Option("--depth", "-d", help="Show modules down to this depth.", min=0)] = None,
    filter_text: Annotated[str | None, typer.Option("--filter", "-f", help="Only modules whose name or type contains this.")] = None,
    json_lines: Annotated[bool, typer.Option("--json", help="One JSON record per module.")] = False,
    **given: Any,
) -> int:
    """Print the module tree with output shapes and layouts; the default target is marked."""
    from gradcam_cli.layers.defaults import clip_layer_paths, task_layer_paths
    from gradcam_cli.layers.paths import resolve_layers
    from gradcam_cli.layers.tree import clip_layer_rows, layer_rows
    from gradcam_cli.model.torchvision_hub import TORCHVISION, clip_length, is_video_model
    from gradcam_cli.model.data_config import default_input_hw
    from gradcam_cli.model.detectors import detector_family
    from gradcam_cli.model.load import build_model, num_prefix_tokens

    from gradcam_cli.run.pipeline import model_prints_to_stderr

    kwargs = dict(parse_kwarg(text) for text in given.get("model_kwargs") or ())
    with model_prints_to_stderr():  # stdout carries the module tree only, whatever the model's code prints
        net, source, arch = build_model(model, pretrained=False, kwargs=kwargs, trust_pickle=bool(given.get("trust_pickle")))
        net.eval()
        family = detector_family(net)  # a detector's defaults are its family's: the feature maps its heads read
        own_hw = family.data_config(net).input_hw if family else default_input_hw(net)  # a detector: the input a run gives it
        input_hw = parse_input_size(given["input_size"]) if given.get("input_size") else own_hw
        if is_video_model(net):  # clips (N, 3, T, H, W): probed at the clip length a run gives it
            clip = (clip_length(net), *(input_hw if given.get("input_size") else TORCHVISION.data_config(net, arch).input_hw))
            defaults = [layer.name for layer in resolve_layers(net, clip_layer_paths(net, (3, *clip)), model)]
            rows = clip_layer_rows(net, clip, defaults)
            size = "x".join(map(str, clip))
            return _write_rows(
                ctx, rows, depth, filter_text, json_lines, f"# input {size}; default target: {', '.join(defaults)} (marked *)"
            )
        paths = family.default_layers(net) if family else task_layer_paths(net, arch, source, input_hw)
        defaults = [layer.name for layer in resolve_layers(net, paths, model)]
        rows = layer_rows(net, input_hw, defaults, num_prefix_tokens(net, source, arch))
    return _write_rows(
        ctx, rows, depth, filter_text, json_lines, f"# input {input_hw[0]}x{input_hw[1]}; default target: {', '.join(defaults)} (marked *)"
    )


def _write_rows(ctx: typer.Context, rows: list[Any], depth: int | None, filter_text: str | None, json_lines: bool, note: str) -> int:
    """The module tree to stdout; the note (the input and the default target) to stderr."""
    streams = command_streams(ctx)
    needle = (filter_text or "").lower()
    for row in rows:
        if depth is not None and row.depth > depth:
            continue
        if needle and needle not in row.name.lower() and needle not in row.type_name.lower():
            continue
        write_line(streams.stdout, _layer_line(row, json_lines))
    if not json_lines:
        write_line(streams.stderr, note)
    return ExitCode.OK


def _layer_line(row: Any, as_json: bool) -> str:
    if as_json:
        return json.dumps({"name": row.name, "type": row.type_name, "shape": row.shape, "layout": row.layout, "default": row.is_default})
    indent = "  " * max(row.depth - 1, 0)
    shape = "x".join(str(s) for s in row.shape) if row.shape else "-"
    mark = "*" if row.is_default else " "
    layout = f"  [{row.layout}]" if row.layout else ""
    return f"{mark} {indent}{row.name}  {row.type_name}  {shape}{layout}"


def methods(ctx: typer.Context) -> int:
    """List the CAM methods: what each is good for and what it costs (their notes are torch-free: as fast as --help)."""
    width = max(len(method.value) for method in METHOD_NOTES)
    for method, note in METHOD_NOTES.items():
        write_line(command_streams(ctx).stdout, f"{method.value:<{width}}  {in_flags(note.summary)} [{note.passes}]")
    return ExitCode.OK


def _with_table_options(command: Any, names: tuple[str, ...]) -> None:
    """The command's own parameters, then these options of the table, as typer reads them."""
    import inspect
    import typing

    hints = typing.get_type_hints(command, include_extras=True)  # the annotations as objects: typer reads their options
    own = [
        p.replace(annotation=hints.get(p.name, p.annotation))
        for p in inspect.signature(command).parameters.values()
        if p.kind is not inspect.Parameter.VAR_KEYWORD
    ]
    command.__signature__ = inspect.Signature([*own, *(parameter(BY_NAME[name]) for name in names)])


_with_table_options(layers, LAYERS_TABLE_OPTIONS)
