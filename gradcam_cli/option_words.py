"""How messages spell the option table's options: as flags on the command line, as preset keys.

Beside the table (option_table.py), so the table holds rows only. A leaf: torch-free.
"""

from __future__ import annotations

from gradcam_cli.errors import spelled
from gradcam_cli.option_table import BY_NAME, OPTIONS, Option


def preset_keys() -> dict[str, Option]:
    """Preset key → its option: the option names, then the singular spellings (`layer`, `class`)."""
    keys = {option.name: option for option in OPTIONS if option.preset}
    keys.update({alias: option for option in OPTIONS if option.preset for alias in option.aliases})
    return keys


def named(option: Option) -> str:
    """The mark of an option that may come from a flag or a preset: `--max-pixels (preset key max_pixels)` on the command line."""
    return f"⟨{option.name}~⟩"


def as_flag(name: str, rest: str | None) -> str:
    """An option mark spelled as the command line's flag: ⟨pretrained=False⟩ → --no-pretrained, ⟨grid=HxW⟩ → --grid HxW.

    A command's own option, outside the table (eval's ⟨boxes⟩, ⟨steps=0⟩), is its name as a flag: --boxes, --steps 0.
    """
    option = BY_NAME.get(name)
    if option is None:
        flag = "--" + name.replace("_", "-")
        return f"{flag} {rest[1:]}" if rest and rest != "~" else flag
    if rest == "~":
        return f"{option.flag} (preset key {option.name})"
    on, _, off = option.flags[0].partition("/")
    if option.kind is bool and rest in ("=True", "=False"):
        return on if rest == "=True" or not off else off
    return f"{option.flag} {rest[1:]}" if rest else option.flag


def in_flags(text: str) -> str:
    """A message of the library, as the command line says it."""
    return spelled(text, as_flag)
