"""What a run of `gradcam explain` is told: the settings, in groups by concern, built from the option table.

`build_settings` checks a value the same way whether it came from a flag or
a preset (the option table, option_table.py, says how). Torch-free: the CLI
imports it before the engine.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gradcam_cli.errors import UsageError, cut
from gradcam_cli.option_table import DEFAULT_MAX_PIXELS, OPTIONS, Option
from gradcam_cli.option_words import named
from gradcam_cli.values import CODE_MODEL, YOLO_PREFIX, Window
from gradcam_cli.vocab import Colormap, Combine, Interpolation, Method, Norm, Plane, Precision, Style, Task, closest


@dataclass(frozen=True, kw_only=True)
class ModelSettings:
    name: str
    pretrained: bool = True
    weights: Path | None = None
    labels: Path | None = None
    ema: bool = False  # the checkpoint's EMA weights instead of its weights
    trust_pickle: bool = False  # a pickled model file (an Ultralytics .pt) may be loaded: it runs the code inside it
    output: str | None = None  # the key, attribute or index of the forward's result holding the class scores
    kwargs: tuple[tuple[str, Any], ...] = ()  # for the model's builder, in the order given
    input_size: tuple[int, ...] | None = None  # the preprocessing, where it overrides the model's own data config: (H, W),
    # or a 3-D model's (D, H, W), its depth the clip length
    mean: tuple[float, float, float] | None = None
    std: tuple[float, float, float] | None = None
    interpolation: Interpolation | None = None
    crop_pct: float | None = None
    clip_len: int | None = None  # a video classifier's frames per clip (its own, or the user's model's), where it overrides

    def preprocessing(self) -> dict[str, Any]:
        """The preprocessing the user set (input_hw, mean, std, interpolation, crop_pct, clip_length), the rest left to
        the model."""
        size = self.input_size
        given: dict[str, Any] = {"input_hw": size[-2:] if size else None, "mean": self.mean, "std": self.std, "crop_pct": self.crop_pct}
        depth = size[0] if size is not None and len(size) == 3 else None
        if depth is not None and self.clip_len is not None and depth != self.clip_len:
            raise UsageError(f"⟨input_size⟩ says {depth} frames or slices deep, ⟨clip_len={self.clip_len}⟩ another: give one")
        given["clip_length"] = self.clip_len or depth
        given["interpolation"] = self.interpolation.value if self.interpolation else None
        return {key: value for key, value in given.items() if value is not None}

    def pretrained_said(self) -> bool | None:
        """What records say of the weights: the hub's pretrained ones (True), a file's or random ones (False), or,
        for a model the user's code builds without ⟨weights⟩, whatever that code loads (None: not ours to say); a YOLO
        config's random ones (False) or a YOLO checkpoint's own (None)."""
        if self.weights is not None:
            return False
        name = self.name.strip()
        if name.startswith(YOLO_PREFIX):
            return None if name.lower().endswith(".pt") else False
        return None if CODE_MODEL.match(name) else self.pretrained


@dataclass(frozen=True, kw_only=True)
class TargetSettings:
    layers: tuple[str, ...] = ()
    method: Method | None = None  # None: the task's own (gradcam; a detector's hirescam)
    classes: tuple[str, ...] = ()
    topk: int = 1
    grid: tuple[int, int] | None = None
    negative: bool = False  # explain minus the class score
    multilabel: bool = False  # independent labels (sigmoid): one map per label above the threshold
    threshold: float | None = None  # with multilabel; None: targets.DEFAULT_THRESHOLD
    output_index: int | None = None  # a regression output's value to explain
    task: Task | None = None  # classify or detect; None: what the model's output says
    score_threshold: float | None = None  # a detector's: None: cams/detections.DEFAULT_SCORE_THRESHOLD
    max_detections: int | None = None  # a detector's: None: cams/detections.DEFAULT_MAX_DETECTIONS
    min_area: float | None = None  # a segmenter's: None: cams/segments.DEFAULT_MIN_AREA
    region: str | tuple[float, float, float, float] | None = None  # a segmenter's: predicted (None), truth, or a box
    mask: Path | None = None  # a segmenter's: a PNG whose nonzero pixels are the region
    prompts: tuple[str, ...] = ()  # a CLIP-style model's texts, one map each
    prompt_file: Path | None = None  # more prompts, one per line
    template: str | None = None  # with labels on a CLIP-style model: a label's prompt; None: matching.DEFAULT_TEMPLATE
    references: tuple[str, ...] = ()  # an embedding model's reference images, averaged into one


@dataclass(frozen=True, kw_only=True)
class MapSettings:
    relu: bool = True
    norm: Norm = Norm.minmax
    combine: Combine | None = None  # None: the task's own (mean; a detector's sum)
    eigen_smooth: bool = False
    aug_smooth: bool = False
    cam_batch_size: int = 32


@dataclass(frozen=True, kw_only=True)
class InputSettings:
    recursive: bool = False
    crop: bool = False
    max_pixels: int = DEFAULT_MAX_PIXELS
    truth: Path | None = None  # a `path,class` CSV file (a detector's: boxes); without one, class folders say the truth
    iou: float = 0.5  # a detector's: the IoU a detection needs with a true box to match it
    every: int = 1  # a video's: every Nth frame explained
    fps: float | None = None  # a video's: F frames a second explained instead (excludes `every`)
    clip_stride: int | None = None  # a video classifier's: frames from one clip's start to the next's (None: its length)
    slices: Plane | None = None  # a volume's: the plane a 2-D model explains slice by slice
    window: Window | None = None  # a volume's intensity window (None: percentiles)

    def __post_init__(self) -> None:
        if self.fps is not None and self.every != 1:
            raise UsageError("⟨every⟩ and ⟨fps⟩ both choose a video's frames; give one")


@dataclass(frozen=True, kw_only=True)
class OutputSettings:
    output_dir: Path = Path("gradcam_out")
    colormap: Colormap = Colormap.jet
    alpha: float = 0.5
    style: Style = Style.overlay
    caption: bool = False
    save_raw: bool = False
    save_guided: bool = False
    each: bool = False  # a detector or segmenter: one overlay per detection or region too
    skip_existing: bool = False
    smooth: int = 1  # a video's: each map the mean of K neighbouring frames' maps
    replace: bool = False  # write over outputs another run (other model, weights, method, layers, style) made
    report: bool = False
    tensorboard: Path | None = None  # a folder of TensorBoard event files the overlays and records also go to
    wandb: str | None = None  # a W&B project the overlays and records also go to


@dataclass(frozen=True, kw_only=True)
class RunSettings:
    batch_size: int = 8
    device: str = "auto"
    precision: Precision = Precision.auto
    workers: int = 0  # decode/write threads; 0 = automatic
    shard: tuple[int, int] | None = None  # (I, N): this process's share of the inputs
    launcher: str | None = None  # torchrun or SLURM when the share came from their environment (inputs/shards.py)
    local_rank: int | None = None  # the launcher's process index on this node: its GPU with device auto
    ray: str | None = None  # a Ray cluster's address (local, auto, ray://...): the images run on Ray Data actors


GROUPS: dict[str, type] = {
    "model": ModelSettings,
    "target": TargetSettings,
    "maps": MapSettings,
    "inputs": InputSettings,
    "outputs": OutputSettings,
    "run": RunSettings,
}


@dataclass(frozen=True, kw_only=True)
class ExplainSettings:
    """Everything a run needs, in groups by concern; built by `build_settings` from flags, a preset and defaults."""

    model: ModelSettings
    target: TargetSettings = field(default_factory=TargetSettings)
    maps: MapSettings = field(default_factory=MapSettings)
    inputs: InputSettings = field(default_factory=InputSettings)
    outputs: OutputSettings = field(default_factory=OutputSettings)
    run: RunSettings = field(default_factory=RunSettings)


def build_settings(given: Mapping[str, Any]) -> ExplainSettings:
    """Flags and preset values (by option name) checked and put into their groups; what is missing takes its default."""
    if not given.get("model"):
        raise UsageError("⟨model⟩ is required (or a ⟨config⟩ preset that names one), e.g. ⟨model=resnet50⟩")
    groups: dict[str, dict[str, Any]] = {name: {} for name in GROUPS}
    for option in OPTIONS:
        if option.group is None:
            continue
        value = given.get(option.name, option.default)
        groups[option.group][option.field or option.name] = _checked(option, value)
    return ExplainSettings(**{name: GROUPS[name](**fields) for name, fields in groups.items()})


KIND_WORDS = {bool: "True or False", int: "a whole number", float: "a finite number", str: "text"}


def _check_kind(option: Option, value: Any) -> None:
    """A value of the option's kind (the Python API passes anything): `topk=1.5` is refused, not cut to 1."""
    kind = option.kind
    if kind is bool:
        fits = isinstance(value, bool)
    elif kind is int:
        fits = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    elif kind is float:
        fits = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    else:
        fits = kind is not str or isinstance(value, str)
    if not fits:
        raise UsageError(f"{named(option)} {cut(repr(value), 40)} ({type(value).__name__}): give {KIND_WORDS.get(kind, kind.__name__)}")


def _checked(option: Option, value: Any) -> Any:
    """One value as its group holds it, with the same check (and message) for a flag and a preset key."""
    if value is None:
        return () if option.kind is list else None
    if option.choices is not None:
        text = str(getattr(value, "value", value)).strip().lower()
        if text not in option.choices:
            close = closest(text, option.choices)
            hint = f" (did you mean '{close}'?)" if close else ""
            raise UsageError(f"{named(option)} '{value}' is unknown; use one of {', '.join(option.choices)}{hint}")
        return option.kind(text)
    if option.kind is list:
        return tuple(option.convert(str(v)) if option.convert else str(v) for v in value)
    if option.kind is Path:
        return Path(value)
    if option.convert is not None:
        return option.convert(str(value))
    _check_kind(option, value)
    if option.kind is int and option.minimum is not None and int(value) < option.minimum:
        raise UsageError(f"{named(option)} {value}: must be {option.minimum} or more{option.minimum_meaning}")
    if option.maximum is not None and not (option.minimum or 0) <= float(value) <= option.maximum:
        raise UsageError(f"⟨{option.name}={float(value)}⟩: must be between {option.minimum or 0:g} and {option.maximum:g}")
    return option.kind(value)
