"""How the command line's typed values are read: numbers, sizes, per-channel statistics, KEY=VALUE arguments, class names.

Each parser takes the text a flag or a preset gives and returns the value, or
raises one UsageError line that marks the option and shows what would do.
Torch-free, like the option table that names them (option_table.py).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gradcam_cli.errors import UsageError, cut, printable
from gradcam_cli.vocab import Interpolation, values

# `file.py:name` or `package.module:name`: a model the user's own code builds; the name may be dotted (`Net.small`)
CODE_MODEL = re.compile(r"^(?P<where>.+\.py|[A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*)*):(?P<attr>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)$")
YOLO_PREFIX = "yolo:"  # an Ultralytics model: `yolo:best.pt` or `yolo:yolov8n.yaml` (model/ultralytics_hub.py), before CODE_MODEL


MAX_DIGITS = 20  # 2**64 has 20 digits: no index, count, size or argument needs more (and int() refuses 4,301)
MAX_INPUT_SIDE = 8192  # well above the largest input any classifier is trained at (~1,000-2,000 pixels)
MAX_NESTING = 32  # a builder's argument nests a few lists or mappings deep; json's recursion would fail near 1,000


def mark(name: str, text: str) -> str:
    """An option's mark with the value as given, cut short: a message never prints a 5,000-digit value whole."""
    return f"⟨{name}='{cut(printable(text), 40)}'⟩"


def numeral(text: str, what: str, accepted: str) -> int | None:
    """`text` as an integer when it is one (ASCII digits, an optional minus), None when it is no numeral at all.

    A numeral Python would misread or choke on is one line naming the option
    (`what`, its mark) and what it accepts (`accepted`): digits of another
    script (`²`, `١`), which `str.isdigit` calls digits but `int` refuses or
    reads, and absurd lengths.
    """
    body = text.strip()
    digits = body[1:] if body.startswith("-") else body
    if not digits or not all(c.isnumeric() for c in digits):
        return None
    if not (digits.isascii() and digits.isdigit()):
        raise UsageError(f"{what}: '{cut(printable(body), 20)}' is not written in the digits 0-9; {accepted}")
    if len(digits) > MAX_DIGITS:
        raise UsageError(f"{what}: a number of {len(digits):,} digits is more than any makes sense (at most {MAX_DIGITS}); {accepted}")
    return int(body)


def _sizes(text: str, what: str, accepted: str) -> list[int] | None:
    """`14x14`, `3, 224, 224` → the numbers; None when a part is missing (`224x`) or is no number."""
    parts = re.split(r"\s*[x×,]\s*|\s+", text.strip().lower())
    numbers = [numeral(part, what, accepted) for part in parts]
    return None if any(number is None for number in numbers) else [int(n) for n in numbers if n is not None]


def parse_grid(text: str) -> tuple[int, int]:
    """`14x14` or `14` → (14, 14): the rows and columns of a layer's tokens."""
    accepted = "give a size like 14x14 (rows x columns of the layer's tokens)"
    sizes = _sizes(text, mark("grid", text), accepted) or []
    if len(sizes) == 1:
        sizes = sizes * 2
    if len(sizes) != 2 or min(sizes) < 1:
        raise UsageError(f"{mark('grid', text)} is not a size like 14x14 (rows x columns of the layer's tokens)")
    return sizes[0], sizes[1]


REGION_WORDS = ("predicted", "truth")


def parse_region(text: str) -> str | tuple[float, float, float, float]:
    """`predicted`, `truth` or `x1,y1,x2,y2` (the photo's pixels) → the region a segmenter's class score is summed over."""
    word = text.strip().lower()
    if word in REGION_WORDS:
        return word
    accepted = "give predicted, truth, or a box x1,y1,x2,y2 in the photo's pixels"
    try:
        corners = [float(part) for part in re.split(r"\s*,\s*|\s+", word) if part]
    except ValueError:
        corners = []
    if len(corners) != 4 or not all(math.isfinite(v) for v in corners):
        raise UsageError(f"{mark('region', text)} is not a region; {accepted}")
    x1, y1, x2, y2 = corners
    if x2 <= x1 or y2 <= y1 or min(corners) < 0:
        raise UsageError(f"{mark('region', text)}: a box needs 0 <= x1 < x2 and 0 <= y1 < y2 (the photo's pixels); {accepted}")
    return x1, y1, x2, y2


def parse_shard(text: str) -> tuple[int, int]:
    """`0/4` → (0, 4): this process's share of the inputs, 0-based, out of N processes."""
    accepted = "give I/N with 0 <= I < N (this process's share, 0-based: 0/4 ... 3/4)"
    index_text, slash, count_text = text.strip().partition("/")
    what = mark("shard", text)
    index, count = numeral(index_text, what, accepted), numeral(count_text, what, accepted)
    if slash and index is not None and count is not None and 0 <= index < count:
        return index, count
    raise UsageError(f"{what} is not I/N with 0 <= I < N (this process's share, 0-based: 0/4 ... 3/4)")


def parse_kwarg(text: str) -> tuple[str, Any]:
    """`depth=18` → ('depth', 18): the value read as JSON (numbers, true, lists, "strings"), else kept as the text.

    JSON's NaN, Infinity and numbers that overflow to it (1e999), integers of
    absurd length and nesting past MAX_NESTING are refused here, with the
    option named, rather than deep in the model's builder.
    """
    import json

    key, equals, value = text.partition("=")
    if not equals or not key.strip().isidentifier():
        raise UsageError(f"⟨model_kwargs='{text}'⟩ is not KEY=VALUE (a Python argument name, then = and its value)")
    what = mark("model_kwargs", text)
    if _nesting(value) > MAX_NESTING:
        raise UsageError(f"{what} nests lists or mappings over {MAX_NESTING} deep; give a builder argument as plain JSON")

    def finite(number: str) -> float:
        if not math.isfinite(parsed := float(number)):
            raise UsageError(f"{what}: {cut(number, 20)} is not a finite number; give one such as 0.1")
        return parsed

    def whole(number: str) -> int:
        parsed = numeral(number, what, "give a number such as 18")
        assert parsed is not None, "json hands over digits only"
        return parsed

    def constant(name: str) -> float:
        raise UsageError(f"{what}: {name} is not a finite number; give one such as 0.1")

    try:
        return key.strip(), json.loads(value, parse_float=finite, parse_int=whole, parse_constant=constant)
    except UsageError:
        raise
    except ValueError:
        return key.strip(), value


def _nesting(text: str) -> int:
    """How deep brackets and braces nest in a JSON text (strings skipped): checked before json recurses into it."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            escaped, in_string = (False, True) if escaped else (char == "\\", char != '"')
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def parse_input_shape(text: str) -> tuple[int, ...]:
    """What ⟨input_size⟩ takes: an image's size (parse_input_size), or a 3-D model's `DxHxW` (a volume's depth, or a clip's
    frames, then height and width; a leading 3 is timm's channels, as ever) → (D, H, W)."""
    sizes = _sizes(text, mark("input_size", text), "give a size like 224, 160x192, or DxHxW for a 3-D model") or []
    if len(sizes) != 3 or sizes[0] == 3:
        return parse_input_size(text)
    if sizes[0] < 1 or sizes[0] > MAX_INPUT_SIDE:
        raise UsageError(f"{mark('input_size', text)}: a depth of {sizes[0]:,} frames or slices (1 to {MAX_INPUT_SIDE:,})")
    return (sizes[0], *parse_input_size(f"{sizes[1]}x{sizes[2]}"))


def parse_input_size(text: str) -> tuple[int, int]:
    """`224`, `160x192` or timm's `3x224x224` (also with commas or spaces) → (height, width)."""
    accepted = f"give a size like 224, 160x192 or 3x224x224 (8 to {MAX_INPUT_SIDE:,} pixels a side)"
    what = mark("input_size", text)
    sizes = _sizes(text, what, accepted) or []
    if len(sizes) == 3 and sizes[0] == 3:
        sizes = sizes[1:]
    if len(sizes) == 1:
        sizes = sizes * 2
    if len(sizes) != 2 or min(sizes) < 8:
        raise UsageError(f"{what} is not a size like 224, 160x192 or 3x224x224 (at least 8 pixels a side)")
    if max(sizes) > MAX_INPUT_SIDE:
        raise UsageError(
            f"{what}: {max(sizes):,} pixels a side is more than a model takes (at most {MAX_INPUT_SIDE:,}); "
            "the image is resized to this before the model sees it"
        )
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
        wrong = not all(math.isfinite(v) for v in values_) or max((abs(v) for v in values_), default=0) > 255
        if len(values_) != 3 or wrong or (name == "std" and min(values_) <= 0):
            above = "; each above 0" if name == "std" else ""
            raise UsageError(f"{mark(name, text)} is not three numbers like 0.485,0.456,0.406 (the 0-1 scale{above})")
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


# ------------------------------------------------------------------ class names

INDEX_WORDS = "give a class index in the digits 0-9, or the class name"


def normalised(name: str) -> str:
    """A class name as folder names, CSV files and ⟨classes⟩ spell it: case, `_`, `-` and repeated spaces do not matter."""
    return re.sub(r"[\s_\-]+", " ", name).strip().casefold()


def class_index(spelling: str, what: str) -> int | None:
    """A class written as an index (ASCII digits, maybe a minus), or None for a name; `what` marks where it was
    written, for the one line that refuses other scripts' digits (`²`) and absurd lengths."""
    return numeral(spelling, what, INDEX_WORDS)


def parse_class(text: str) -> str:
    """A ⟨classes⟩ value as given (a name, or an index the model checks once it is built), its numerals checked now."""
    class_index(text, mark("classes", text))
    return text


class ClassIndex:
    """The model's classes by every spelling that names one: the full name, each comma-separated synonym, an alias.

    The one rule for ⟨classes⟩, a ⟨truth⟩ file and class folders: "tabby cat"
    names ImageNet's "tabby, tabby cat" wherever a class is written.
    """

    def __init__(self, class_names: Sequence[str] | None, aliases: Sequence[str] | None = None) -> None:
        self.names = list(class_names or [])
        self._by_spelling: dict[str, int] = {}
        for index, name in enumerate(self.names):
            self._add(name, index)
        for index, name in enumerate(self.names):  # "tabby, tabby cat": each synonym names it, unless a full name does
            for part in name.split(","):
                self._add(part, index)
        for index, alias in enumerate(aliases or []):
            self._add(alias, index)

    def _add(self, spelling: str, index: int) -> None:
        key = normalised(spelling)
        if key:
            self._by_spelling.setdefault(key, index)

    def find(self, spelling: str, what: str = "class") -> int | None:
        """The class a name (or an index written in digits) means, or None."""
        index = self._by_spelling.get(normalised(spelling))
        if index is None:
            number = class_index(spelling, what)
            index = number if number is not None and 0 <= number < len(self.names) else None
        return index

    def spellings(self) -> list[str]:
        """Every spelling that names a class, for a "did you mean" when none does."""
        return list(self._by_spelling)


WINDOW_EXAMPLES = "e.g. 40,400 (soft tissue), -600,1500 (lung), 400,1800 (bone)"


@dataclass(frozen=True)
class Window:
    """A display window: values in [centre - width/2, centre + width/2] map to [0, 1]."""

    centre: float
    width: float

    def __str__(self) -> str:
        return f"window {self.centre:g},{self.width:g}"


def parse_window(text: str) -> Window:
    """'C,W' (centre, width; e.g. '40,400' or '-600,1500') → a Window; bad text is a UsageError saying what is taken."""
    parts = [part.strip() for part in str(text).split(",")]
    shown = str(text)[:40]
    try:
        centre, width = (float(part) for part in parts)
    except ValueError:
        raise UsageError(f"⟨window={shown}⟩ is not two numbers C,W (the window's centre and width)", hint=WINDOW_EXAMPLES) from None
    if not (math.isfinite(centre) and math.isfinite(width)):
        raise UsageError(f"⟨window={shown}⟩: the centre and width must be finite numbers", hint=WINDOW_EXAMPLES)
    if width <= 0:
        raise UsageError(f"⟨window={shown}⟩: the width must be above 0", hint=WINDOW_EXAMPLES)
    return Window(centre, width)
