"""Which blocks of a stack of equal blocks (a ViT's encoder) stand for its stages: every k-th, ending at the last."""

from __future__ import annotations

import math

STAGE_ROWS = 4  # about this many: enough to see the evidence form, few enough to read as a grid's rows


def every_kth(count: int, rows: int = STAGE_ROWS) -> list[int]:
    """Indices of `count` blocks, every k-th so that at most `rows` are kept, the last block always among them."""
    step = max(1, math.ceil(count / rows))
    return sorted(range(count - 1, -1, -step))
