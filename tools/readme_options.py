"""Write the README's option table and preset key list from the one option table (gradcam_cli/option_table.py).

python tools/readme_options.py          # rewrite README.md between the markers
python tools/readme_options.py --check  # exit 1 when README.md differs (tests/test_docs.py checks the same)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gradcam_cli.option_table import OPTIONS, Option  # noqa: E402


def markdown_table() -> str:
    """The README's table of `gradcam explain`'s arguments and options, from the table (a test keeps them equal)."""
    rows = ["| option | meaning |", "|---|---|"]
    for option in OPTIONS:
        rows.append(f"| `{_shown_flags(option)}` | {option.doc or option.help} |")
    return "\n".join(rows)


def _shown_flags(option: Option) -> str:
    """`-m, --model NAME`, `--relu / --no-relu`, `--norm minmax\\|none`: the spelling a reader types."""
    if not option.flags:
        return option.metavar
    longs = [f for f in option.flags if f.startswith("--")]
    shorts = [f for f in option.flags if not f.startswith("--")]
    text = ", ".join([*shorts, *(f.replace("/", " / ") for f in longs)])
    metavar = option.metavar.replace("|", "\\|")
    choices = option.choices
    if choices is not None and len(choices) <= 3:
        return text + " " + "\\|".join(choices)
    return f"{text} {metavar}" if metavar and option.kind is not bool else text


def preset_key_list() -> str:
    """The README's list of preset keys: the option names (the singular aliases are said beside it)."""
    return ", ".join(option.name for option in OPTIONS if option.preset)


BLOCKS = {"options-table": markdown_table, "preset-keys": lambda: f"`{preset_key_list()}`"}


def rendered(readme: str) -> str:
    """README text with every generated block replaced by what the table gives now."""
    for name, make in BLOCKS.items():
        pattern = re.compile(rf"(<!-- {name}:start -->\n).*?(\n<!-- {name}:end -->)", re.S)
        if not pattern.search(readme):
            raise SystemExit(f"README.md has no <!-- {name}:start --> ... <!-- {name}:end --> block")
        readme = pattern.sub(lambda m, make=make: m.group(1) + make() + m.group(2), readme)
    return readme


def main() -> int:
    path = ROOT / "README.md"
    text = path.read_text(encoding="utf-8")
    new = rendered(text)
    if "--check" in sys.argv:
        return int(new != text)
    path.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
