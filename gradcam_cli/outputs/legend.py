"""The colour scale of a picture: a small bar of the colour map used, its ends labelled with what they mean.

Without it the colours of an overlay say nothing: ⟨colormap⟩ changes them and
⟨norm⟩ what their ends are. With minmax each map is scaled to [0, 1], its
lowest evidence to its highest (`low 0 ▭ 1 high`); with none the picture still
spans the colours, from the map's own raw minimum to its maximum, and the
ends say those values (`raw 0 ▭ 0.0421`). Drawn into the caption band under
an overlay (picture.py) and into the comparison grid's header (grid.py);
Pillow and numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gradcam_cli.outputs.text import font
from gradcam_cli.vocab import Colormap

BAR_LENGTH = 6  # the bar's length, in text heights: long enough to see the colours run
BAR_HEIGHT = 0.7  # the bar's height, as a share of the text height
OUTLINE = (128, 128, 128)  # the bar's frame: seen on the dark caption band and on the grid's white alike

Box = tuple[int, int, int, int]  # x, y, width, height in pixels


@dataclass(frozen=True)
class Scale:
    """What the ends of the colour bar mean: the values at its low and high end, and a word outside each."""

    low: str
    high: str
    before: str = ""  # left of the low end: `low`, `raw`
    after: str = ""  # right of the high end: `high`

    def parts(self) -> list[str | None]:
        """The words and values in drawing order, the bar as None; a word left empty takes no room."""
        return [part for part in (self.before, self.low, None, self.high, self.after) if part != ""]


MINMAX = Scale("0", "1", before="low", after="high")  # ⟨norm=minmax⟩: every map scaled to [0, 1]
EACH_RAW = Scale("min", "max", before="raw")  # ⟨norm=none⟩ in a grid: each cell from its own minimum to its maximum


def raw_scale(low: float, high: float) -> Scale:
    """⟨norm=none⟩: the map's own raw minimum and maximum at the ends, which the picture's colours span."""
    return Scale(_number(low), _number(high), before="raw")


def display_scale(cam: Any, raw_norm: bool) -> Scale:
    """What the ends of a picture's colours mean: 0 and 1, or with raw values (norm none) the map's own minimum and
    maximum (`cam`: a tensor or an array), which render.photo_maps scales to them for display."""
    return raw_scale(float(cam.min()), float(cam.max())) if raw_norm else MINMAX


def _number(value: float) -> str:
    """A raw value short enough for a label: three significant digits (`0.0421`, `3.21e+04`)."""
    return f"{value:.3g}" if np.isfinite(value) else "?"


def _gap(size: int) -> int:
    return max(3, size // 3)


def _bar_size(size: int) -> tuple[int, int]:
    return BAR_LENGTH * size, max(4, round(size * BAR_HEIGHT))


def legend_width(scale: Scale, size: int) -> int:
    """The width in pixels of the legend drawn with text of `size` pixels: words, values and the bar, with gaps."""
    face = font(size)
    parts = scale.parts()
    texts = sum(int(np.ceil(face.getlength(part))) for part in parts if part is not None)
    return texts + _bar_size(size)[0] + (len(parts) - 1) * _gap(size)


def bar_pixels(colormap: Colormap, width: int, height: int) -> np.ndarray:
    """The colour map from 0 (left) to 1 (right) as an RGB strip: the very colours the overlay uses for those values."""
    from gradcam_cli.outputs.render import colorize

    levels = np.linspace(0.0, 1.0, max(2, width), dtype=np.float32)[None, :]
    return np.repeat(colorize(levels, colormap), height, axis=0)


def draw_legend(canvas: Any, x: int, y: int, height: int, scale: Scale, colormap: Colormap, size: int, ink: tuple[int, ...]) -> Box:
    """The legend on a PIL canvas from (x, y), centred in a line `height` pixels tall; returns the bar's box (its colours
    inside the frame), so a caller and a test know where the colours are."""
    from PIL import Image, ImageDraw

    face = font(size)
    draw = ImageDraw.Draw(canvas)
    ascent, descent = face.getmetrics()
    text_y = y + (height - ascent - descent) / 2
    bar_w, bar_h = _bar_size(size)
    bar_y = y + (height - bar_h) // 2
    bar: Box = (0, 0, 0, 0)
    for part in scale.parts():
        if part is not None:
            draw.text((x, text_y), part, fill=ink, font=face)
            x += int(np.ceil(face.getlength(part))) + _gap(size)
            continue
        canvas.paste(Image.fromarray(bar_pixels(colormap, bar_w, bar_h)), (x, bar_y))
        draw.rectangle((x - 1, bar_y - 1, x + bar_w, bar_y + bar_h), outline=OUTLINE)
        bar = (x, bar_y, bar_w, bar_h)
        x += bar_w + _gap(size)
    return bar
