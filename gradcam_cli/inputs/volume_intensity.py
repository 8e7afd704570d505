"""A volume's intensities scaled to [0, 1] for a model and for viewing: a CT window, or percentiles by default.

CT values are Hounsfield units with a fixed meaning, so a window (centre and
width, as radiologists name them: 40,400 soft tissue, -600,1500 lung) is exact
and comparable across scans; MRI has no absolute scale, so the default clips
the 0.5 and 99.5 percentiles (a few hot voxels do not squash the rest to
black). Each scaling returns the one line that the record says it was.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gradcam_cli.errors import UsageError

LOW_PERCENTILE, HIGH_PERCENTILE = 0.5, 99.5
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


def scale_intensity(data: np.ndarray, window: Window | None = None) -> tuple[np.ndarray, str]:
    """The volume as float32 in [0, 1] (NaN as the lowest value) and the statement of how, for the record.

    With a window: clipped to it. Without: the 0.5 and 99.5 percentiles of the
    finite voxels to 0 and 1 ("percentiles 0.5-99.5: -1000..1200"); a constant
    volume becomes all 0.
    """
    values = np.asarray(data, dtype=np.float32)
    if window is not None:
        low, high = window.centre - window.width / 2, window.centre + window.width / 2
        statement = str(window)
    else:
        finite = values[np.isfinite(values)]
        low, high = (float(v) for v in np.percentile(finite, [LOW_PERCENTILE, HIGH_PERCENTILE])) if finite.size else (0.0, 0.0)
        statement = f"percentiles {LOW_PERCENTILE:g}-{HIGH_PERCENTILE:g}: {low:.6g}..{high:.6g}"
    if high <= low:
        return np.zeros(values.shape, dtype=np.float32), f"{statement} (constant volume)"
    scaled = (np.nan_to_num(values, nan=low, posinf=high, neginf=low) - np.float32(low)) / np.float32(high - low)
    return np.clip(scaled, 0.0, 1.0).astype(np.float32, copy=False), statement
