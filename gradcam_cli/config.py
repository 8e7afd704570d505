"""Run presets: YAML files naming the model, layers, method and options.

A preset fills in what the command line did not say; flags always win. An
unknown key or a value of the wrong kind is a usage error that names it.
"""
from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Callable

from .errors import UsageError


def _as_bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise UsageError(f"config key '{key}': expected true or false, got {value!r}")


def _as_int(key: str, value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise UsageError(f"config key '{key}': expected a whole number, got {value!r}")


def _as_float(key: str, value: Any) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise UsageError(f"config key '{key}': expected a number, got {value!r}")


def _as_str(key: str, value: Any) -> str:
    if isinstance(value, str) and value.strip():
        return value
    raise UsageError(f"config key '{key}': expected text, got {value!r}")


def _as_str_list(key: str, value: Any) -> list[str]:
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        return [str(value)]
    if isinstance(value, list) and value and all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in value):
        return [str(v) for v in value]
    raise UsageError(f"config key '{key}': expected a name or a list of names, got {value!r}")


# preset key → (explain parameter name, converter)
PRESET_KEYS: dict[str, tuple[str, Callable[[str, Any], Any]]] = {
    "model": ("model", _as_str),
    "pretrained": ("pretrained", _as_bool),
    "weights": ("weights", _as_str),
    "labels": ("labels", _as_str),
    "layers": ("layers", _as_str_list),
    "layer": ("layers", _as_str_list),
    "method": ("method", _as_str),
    "class": ("classes", _as_str_list),
    "classes": ("classes", _as_str_list),
    "topk": ("topk", _as_int),
    "crop": ("crop", _as_bool),
    "colormap": ("colormap", _as_str),
    "alpha": ("alpha", _as_float),
    "save_raw": ("save_raw", _as_bool),
    "batch_size": ("batch_size", _as_int),
    "device": ("device", _as_str),
    "grid": ("grid", _as_str),
    "output_dir": ("output_dir", _as_str),
    "recursive": ("recursive", _as_bool),
    "relu": ("relu", _as_bool),
    "norm": ("norm", _as_str),
    "combine": ("combine", _as_str),
    "eigen_smooth": ("eigen_smooth", _as_bool),
    "aug_smooth": ("aug_smooth", _as_bool),
    "cam_batch_size": ("cam_batch_size", _as_int),
    "save_guided": ("save_guided", _as_bool),
    "precision": ("precision", _as_str),
    "workers": ("workers", _as_int),
    "max_pixels": ("max_pixels", _as_int),
}


def load_preset(path: Path) -> dict[str, Any]:
    """Parameter name → checked value; `weights` and `labels` are relative to the preset's folder."""
    import yaml

    if not path.is_file():
        raise UsageError(f"--config {path}: no such file")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UsageError(f"--config {path}: not valid YAML ({first})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(f"--config {path}: expected a mapping of option: value at the top level")
    values: dict[str, Any] = {}
    for key, value in data.items():
        spec = PRESET_KEYS.get(str(key).replace("-", "_"))
        if spec is None:
            close = difflib.get_close_matches(str(key), list(PRESET_KEYS), n=1, cutoff=0.6)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise UsageError(f"--config {path}: unknown key '{key}'{hint}; known keys: {', '.join(PRESET_KEYS)}")
        name, convert = spec
        values[name] = convert(str(key), value)
    for name in ("weights", "labels"):
        if name in values and not Path(values[name]).expanduser().is_absolute():
            values[name] = str(path.parent / values[name])
    return values
