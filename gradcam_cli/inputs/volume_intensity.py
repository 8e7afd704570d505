"""A volume's intensities scaled to [0, 1] for a model and for viewing: a CT window, or percentiles by default.

CT values are Hounsfield units with a fixed meaning, so a window (centre and
width, as radiologists name them: 40,400 soft tissue, -600,1500 lung) is exact
and comparable across scans; MRI has no absolute scale, so the default clips
the 0.5 and 99.5 percentiles (a few hot voxels do not squash the rest to
black). Each scaling returns the one line that the record says it was.
"""

from __future__ import annotations


import numpy as np

from gradcam_cli.values import Window, parse_window

__all__ = ["Window", "parse_window", "scale_intensity"]

LOW_PERCENTILE, HIGH_PERCENTILE = 0.5, 99.5


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
