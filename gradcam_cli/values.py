"""How the command line's typed values are read: sizes, per-channel statistics, KEY=VALUE arguments.

Each parser takes the text a flag or a preset gives and returns the value, or
raises one UsageError line that marks the option and shows what would do.
Torch-free, like the option table that names them (option_table.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gradcam_cli.errors import UsageError
from gradcam_cli.vocab import Interpolation, values


def parse_grid(text: str) -> tuple[int, int]:
    """`14x14` or `14` → (14, 14): the rows and columns of a layer's tokens."""
    parts = text.lower().replace("×", "x").split("x")
    try:
        sizes = [int(p) for p in parts]
    except ValueError:
        sizes = []
    if len(sizes) == 1:
        sizes = sizes * 2
    if len(sizes) != 2 or min(sizes) < 1:
        raise UsageError(f"⟨grid='{text}'⟩ is not a size like 14x14 (rows x columns of the layer's tokens)")
    return sizes[0], sizes[1]


def parse_shard(text: str) -> tuple[int, int]:
    """`0/4` → (0, 4): this process's share of the inputs, 0-based, out of N processes."""
    index, slash, count = text.strip().partition("/")
    if slash and index.isdigit() and count.isdigit() and 0 <= int(index) < int(count):
        return int(index), int(count)
    raise UsageError(f"⟨shard='{text}'⟩ is not I/N with 0 <= I < N (this process's share, 0-based: 0/4 ... 3/4)")


def parse_kwarg(text: str) -> tuple[str, Any]:
    """`depth=18` → ('depth', 18): the value read as JSON (numbers, true, lists, "strings"), else kept as the text."""
    import json

    key, equals, value = text.partition("=")
    if not equals or not key.strip().isidentifier():
        raise UsageError(f"⟨model_kwargs='{text}'⟩ is not KEY=VALUE (a Python argument name, then = and its value)")
    try:
        return key.strip(), json.loads(value)
    except ValueError:
        return key.strip(), value


def parse_input_size(text: str) -> tuple[int, int]:
    """`224`, `160x192` or timm's `3x224x224` (also with commas or spaces) → (height, width)."""
    parts = [p for p in text.lower().replace("×", "x").replace(",", "x").replace(" ", "x").split("x") if p]
    try:
        sizes = [int(p) for p in parts]
    except ValueError:
        sizes = []
    if len(sizes) == 3 and sizes[0] == 3:
        sizes = sizes[1:]
    if len(sizes) == 1:
        sizes = sizes * 2
    if len(sizes) != 2 or min(sizes) < 8:
        raise UsageError(f"⟨input_size='{text}'⟩ is not a size like 224, 160x192 or 3x224x224 (at least 8 pixels a side)")
    return sizes[0], sizes[1]


def parse_channels(name: str) -> Callable[[str], tuple[float, float, float]]:
    """`0.485,0.456,0.406` (or one value for all three) → the per-channel statistic, on the 0-1 scale."""

    def parse(text: str) -> tuple[float, float, float]:
        try:
            values_ = [float(p) for p in text.replace(" ", ",").split(",") if p]
        except ValueError:
            values_ = []
        if len(values_) == 1:
            values_ = values_ * 3
        if len(values_) != 3 or (name == "std" and min(values_) <= 0) or max(abs(v) for v in values_) > 255:
            above = "; each above 0" if name == "std" else ""
            raise UsageError(f"⟨{name}='{text}'⟩ is not three numbers like 0.485,0.456,0.406 (the 0-1 scale{above})")
        if max(abs(v) for v in values_) > 1.5:  # written on the 0-255 scale, as some papers give them
            values_ = [v / 255 for v in values_]
        return values_[0], values_[1], values_[2]

    return parse


def checked_preprocessing(input_hw: Any, mean: Any, std: Any, interpolation: str | None, crop_pct: float | None) -> dict[str, Any]:
    """The Python API's preprocessing overrides, checked by the CLI's parsers (the same limits, the same messages)."""

    given: dict[str, Any] = {}
    if input_hw is not None:
        size = [input_hw] if isinstance(input_hw, int) else list(input_hw)
        given["input_hw"] = parse_input_size("x".join(str(v) for v in size))
    for key, value in (("mean", mean), ("std", std)):
        if value is not None:
            given[key] = parse_channels(key)(",".join(str(v) for v in ([value] if isinstance(value, (int, float)) else value)))
    if interpolation is not None:
        if str(interpolation) not in values(Interpolation):
            raise UsageError(f"interpolation={interpolation!r} is unknown; use one of {', '.join(values(Interpolation))}")
        given["interpolation"] = str(interpolation)
    if crop_pct is not None:
        if not 0.05 <= float(crop_pct) <= 1:
            raise UsageError(f"crop_pct={crop_pct}: must be between 0.05 and 1")
        given["crop_pct"] = float(crop_pct)
    return given
