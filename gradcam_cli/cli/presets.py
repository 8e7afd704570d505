"""Run presets: YAML files naming the model, layers, method and options.

A preset fills in what the command line did not say; flags always win. An
unknown key or a value of the wrong kind is a usage error that names it.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any
from collections.abc import Callable

from gradcam_cli.errors import UsageError, one_line
from gradcam_cli.option_table import Option
from gradcam_cli.option_words import preset_keys


def _as_bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise UsageError(f"config key '{key}': expected true or false, got {_shown(value)}")


def _as_int(key: str, value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise UsageError(f"config key '{key}': expected a whole number, got {_shown(value)}")


def _as_float(key: str, value: Any) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise UsageError(f"config key '{key}': expected a number, got {_shown(value)}")


def _as_str(key: str, value: Any) -> str:
    if isinstance(value, str) and value.strip():
        return value
    raise UsageError(f"config key '{key}': expected text, got {_shown(value)}")


def _as_str_list(key: str, value: Any) -> list[str]:
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        return [str(value)]
    if isinstance(value, list) and value and all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in value):
        return [str(v) for v in value]
    raise UsageError(f"config key '{key}': expected a name or a list of names, got {_shown(value)}")


def _converter(option: Option) -> Callable[[str, Any], Any]:
    """A preset value's check, from the option's kind (the range and choice checks follow in build_settings)."""
    if option.kind is bool:
        return _as_bool
    if option.kind is int:
        return _as_int
    if option.kind is float:
        return _as_float
    if option.kind is list:
        return _as_str_list
    return _as_str


def load_preset(path: Path) -> dict[str, Any]:
    """Option name → value of the right kind; every path option is relative to the preset's folder."""
    if not path.is_file():
        raise UsageError(f"--config {path}: no such file")
    data = _safe_yaml(_read_preset_text(path), path)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(f"--config {path}: expected a mapping of option: value at the top level")
    values: dict[str, Any] = {}
    keys = preset_keys()
    for key, value in data.items():
        option = keys.get(str(key).replace("-", "_"))
        if option is None:
            close = difflib.get_close_matches(str(key), list(keys), n=1, cutoff=0.6)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise UsageError(
                f"--config {path}: unknown key '{one_line(key, 40)}'{hint}; the keys are the options' long names "
                "(`--score-threshold` is `score_threshold`), listed in the README's preset keys"
            )
        values[option.name] = _converter(option)(str(key), value)
        if option.path:  # the one path rule: relative to the preset's own folder, like any file it names
            values[option.name] = _beside(path, values[option.name])
    return values


def _beside(preset: Path, value: Any) -> Any:
    """A path option's value, relative to the preset's folder (each of a list's)."""
    if isinstance(value, (list, tuple)):
        return [_beside(preset, one) for one in value]
    named = Path(value).expanduser()
    return str(named if named.is_absolute() else preset.parent / named)


# ---------------------------------------------------------------- YAML safety

# The shipped presets are ~300 bytes; 64 KiB leaves room for any comments and
# still parses in well under a second (PyYAML is pure Python here).
MAX_PRESET_BYTES = 64 * 1024
MAX_SHOWN_CHARS = 80  # an error message shows at most this much of a value
# A preset nests 3 deep (mapping, list, name). PyYAML's scanner costs grow with
# the square of the depth, so 5,000 '[' took a second to reach Python's recursion limit.
MAX_PRESET_DEPTH = 10


class _AliasUsed(Exception):
    """Raised by the preset loader at the first `*alias`; carries the YAML event."""


class _TooDeep(Exception):
    """Raised by the preset loader past MAX_PRESET_DEPTH; carries the YAML event."""


def _preset_loader() -> type:
    """yaml.SafeLoader that refuses aliases.

    A preset is a flat `option: value` mapping, so anchors and aliases buy it
    nothing, while nested aliases ("billion laughs") turn a 1 KB file into
    billions of nodes for whatever walks or prints the value. Refusing them is
    simpler and safer than counting expansions against a tuned limit.
    """
    import yaml

    class PresetLoader(yaml.SafeLoader):
        depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                raise _AliasUsed(self.peek_event())
            if self.depth >= MAX_PRESET_DEPTH:
                raise _TooDeep(self.peek_event())
            self.depth += 1
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

    return PresetLoader


def _read_preset_text(path: Path) -> str:
    """The preset's text (a UTF-8 BOM dropped); a file too big to be a preset is not read."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_PRESET_BYTES + 1)
    except OSError as error:
        raise UsageError(f"--config {path}: cannot read it ({error.strerror or type(error).__name__})") from None
    if len(raw) > MAX_PRESET_BYTES:
        raise UsageError(
            f"--config {path}: over {MAX_PRESET_BYTES // 1024} KiB, too big for a preset; a preset is a short YAML mapping of option: value"
        )
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise UsageError(f"--config {path}: not valid YAML (not UTF-8 text at byte {error.start}); save it as UTF-8") from None


def _safe_yaml(text: str, path: Path) -> Any:
    """Parse a preset: safe tags only, no aliases, every failure one short line."""
    import yaml

    try:
        return yaml.load(text, Loader=_preset_loader())  # noqa: S506 - a SafeLoader subclass
    except _AliasUsed as refused:
        event = refused.args[0]
        raise UsageError(
            f"--config {path}: line {event.start_mark.line + 1} uses the YAML alias *{one_line(event.anchor, 40)}; "
            "a preset may not use aliases (&name/*name), write the value out"
        ) from None
    except _TooDeep as refused:
        line = refused.args[0].start_mark.line + 1
        raise UsageError(f"--config {path}: line {line} nests values over {MAX_PRESET_DEPTH} deep; a preset is option: value") from None
    except (yaml.YAMLError, ValueError, OverflowError) as error:  # ValueError: an int of 5,000 digits, a bad date
        raise UsageError(f"--config {path}: not valid YAML ({_yaml_problem(error)})") from None


def _yaml_problem(error: Exception) -> str:
    """What PyYAML found and where, cut short; its own message spans several lines."""
    problem = getattr(error, "problem", None)
    mark = getattr(error, "problem_mark", None)
    if problem and mark is not None:
        return one_line(f"{problem} at line {mark.line + 1}, column {mark.column + 1}")
    return one_line(str(error) or type(error).__name__)


def _shown(value: Any) -> str:
    """A value as an error message shows it: a repr bounded in depth and length, then cut."""
    import reprlib

    bounded = reprlib.Repr()
    bounded.maxlevel = 3
    bounded.maxlist = bounded.maxtuple = bounded.maxdict = bounded.maxset = 8
    bounded.maxstring = bounded.maxother = MAX_SHOWN_CHARS
    return one_line(bounded.repr(value))
