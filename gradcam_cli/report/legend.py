"""The report's colour legend: which colour map the overlays were drawn with, and what its colours mean.

Where a record names its colour map (`settings.colormap`) that is the answer.
Records that do not (written before records named it) leave the run's
command line in runs.jsonl, read only where it is sure: `--colormap` given
there (flags win over a preset), else the default when no preset (`--config`)
could have set another. A run whose colours are not known gets no legend
rather than a wrong one. The overlay always shows each map scaled to its own
range (render.photo_maps), whatever the norm; the norm says what the `.npy`
files hold.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from typing import Any

from gradcam_cli.option_table import OPTIONS, Option

# OpenCV's colour maps (outputs/render.colorize) at 0, 1/8, ..., 1; tests/test_report.py checks them against colorize
STOPS: dict[str, tuple[str, ...]] = {
    "jet": ("#000080", "#0000ff", "#0080ff", "#02fffe", "#82ff7e", "#feff01", "#ff8000", "#ff0000", "#800000"),
    "turbo": ("#30123b", "#466be3", "#28bceb", "#32f298", "#a4fc3c", "#ecd13a", "#fb8122", "#d23105", "#7a0403"),
    "viridis": ("#440154", "#472d7b", "#3b528b", "#2c728e", "#21918c", "#27ad81", "#5cc863", "#aadc32", "#fde725"),
    "inferno": ("#000004", "#210c4a", "#57106e", "#8a226a", "#bc3754", "#e35933", "#f98c0a", "#f9c932", "#fcffa4"),
    "magma": ("#000004", "#1d1147", "#51127c", "#832681", "#b73779", "#e55064", "#fb8761", "#fec287", "#fcfdbf"),
    "plasma": ("#0d0887", "#4c02a1", "#7e03a8", "#aa2395", "#cc4778", "#e56b5d", "#f89441", "#fdc328", "#f0f921"),
    "hot": ("#000000", "#500000", "#a00000", "#f00000", "#ff4100", "#ff8e00", "#ffde00", "#ffff5f", "#ffffff"),
    "gray": ("#000000", "#202020", "#404040", "#606060", "#808080", "#9f9f9f", "#bfbfbf", "#dfdfdf", "#ffffff"),
}
COMMANDS = ("explain", "eval")  # the commands that draw overlays, both with explain's --colormap and --norm
PRESET_FLAG = "--config"
_OPTION = {option.name: option for option in OPTIONS}
_TAKES_VALUE = {flag for option in OPTIONS if option.kind is not bool for flag in option.flags}


def from_command(command: str | None, name: str) -> str | None:
    """The value of explain's option `name` in a run's command line, when the line says it for sure; else None."""
    option = _OPTION[name]
    try:
        words = shlex.split(command or "")
    except ValueError:  # unbalanced quotes: not a line explain wrote
        return None
    if words[:1] != ["gradcam"] or len(words) < 2 or words[1] not in COMMANDS:
        return None
    given, preset = _scan(words[2:], option)
    if given is not None:
        return given or None  # "" : the flag's value is missing
    return None if preset or option.default is None else str(option.default)


def _scan(words: list[str], option: Option) -> tuple[str | None, bool]:
    """The option's last value on the line ("" when the flag ends the line) and whether a preset is named."""
    given, preset, index = None, False, 0
    while index < len(words) and words[index] != "--":  # after "--" every word is an input
        flag, equals, attached = words[index].partition("=") if words[index].startswith("--") else (words[index], "", "")
        following = words[index + 1] if index + 1 < len(words) else ""
        if flag in option.flags:
            given = attached if equals else following
        preset = preset or flag == PRESET_FLAG
        index += 2 if flag in _TAKES_VALUE and not equals else 1
    return given, preset


def run_colours(run: dict[str, Any]) -> tuple[str | None, str | None]:
    """A run's colour map and norm as its command line says them (None where it cannot be sure)."""
    command = run.get("command")
    colormap, norm = from_command(command, "colormap"), from_command(command, "norm")
    return (colormap if colormap in STOPS else None), norm


def legends(records: Iterable[dict[str, Any]], runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The legends the page shows: one per colour map and norm; from the records when they name their colour map,
    else from the runs (numbered as the page lists them, when not all share it), the runs whose colours are unknown
    left out."""
    records = list(records)
    norms = {(record.get("settings") or {}).get("norm") for record in records}
    norm_of_records = norms.pop() if len(norms) == 1 else None
    named = [(record.get("settings") or {}).get("colormap") for record in records]
    found: dict[tuple[str, Any], list[int]] = {}
    if any(named):
        for colormap, record in zip(named, records):
            if colormap in STOPS:
                found.setdefault((colormap, (record.get("settings") or {}).get("norm")), [])
    else:
        for number, run in enumerate(runs, start=1):
            colormap, norm = run_colours(run)
            if colormap is not None:
                found.setdefault((colormap, norm_of_records or norm), []).append(number)
    return [
        {"colormap": colormap, "stops": list(STOPS[colormap]), "norm": norm if norm in ("minmax", "none") else None,
         "runs": numbers if len(numbers) < len(runs) else []}  # one that holds for every run needs no run numbers
        for (colormap, norm), numbers in found.items()
    ]  # fmt: skip
