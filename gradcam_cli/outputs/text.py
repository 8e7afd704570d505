"""Text on pictures: Pillow's scalable default font, labels as one line, cutting a line to a width, a score's words.

Shared by the captions under an overlay (picture.py), the comparison grid
(grid.py) and the evaluation charts (charts.py), so a long class name is cut
the same way everywhere.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from gradcam_cli.vocab import TargetKind


@lru_cache(maxsize=8)
def font(size: int) -> Any:
    """Pillow's own scalable font at `size` pixels: no font file to find on the machine."""
    from PIL import ImageFont

    return ImageFont.load_default(size=size)


def one_line(text: str) -> str:
    """A label as one line: control characters (a newline in a class name) become spaces."""
    return "".join(c if c.isprintable() else " " for c in text)


def fitted(text: str, face: Any, width: float, nothing: str = "") -> str:
    """The longest head of `text` (with '…') that fits in `width` pixels in this font; `nothing` when not even one
    character does (a grid's cell leaves it empty, a caption shows '…')."""
    if face.getlength(text) <= width:
        return text
    low, high = 0, len(text)
    while low < high:  # binary search on the number of characters kept
        middle = (low + high + 1) // 2
        low, high = (middle, high) if face.getlength(text[:middle] + "…") <= width else (low, middle - 1)
    return text[:low].rstrip() + "…" if low else nothing


def described_score(kind: TargetKind, index: int | None, name: str | None, score: float | None) -> str | None:
    """A target whose score is a value, as captions and the terminal say it: `output 0 = 3.2`, `"a dog" 27.3`,
    `like ref.jpg 0.812`; None for a class (its name and probability say it)."""
    if kind is TargetKind.regression:
        return f"output {index} = {score:.4g}"
    if kind is TargetKind.prompt:
        return f'"{name}" {score:.4g}'
    if kind is TargetKind.reference:
        return f"like {name} {score:.3f}"
    return None
