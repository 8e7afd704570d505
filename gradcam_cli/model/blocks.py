"""Blocks of a network: which of a stack of equal blocks (a ViT's encoder) stand for its stages (every k-th, ending at
the last), and which modules are normalization layers."""

from __future__ import annotations

import math
import re

from torch import nn

STAGE_ROWS = 4  # about this many: enough to see the evidence form, few enough to read as a grid's rows


def every_kth(count: int, rows: int = STAGE_ROWS) -> list[int]:
    """Indices of `count` blocks, every k-th so that at most `rows` are kept, the last block always among them."""
    step = max(1, math.ceil(count / rows))
    return sorted(range(count - 1, -1, -step))


NORM_NAME = re.compile(r"(Norm|Norm\d?[dD])$")  # LayerNorm, RmsNorm, LayerNorm2d, BatchNorm2d: timm's and others' norms


def input_channels_3d(model: nn.Module) -> int:
    """The channels a 3-D network's first Conv3d reads (a CT network's 1, a video ResNet's 3); 3 when it has none."""
    first = next((module for module in model.modules() if isinstance(module, nn.Conv3d)), None)
    return int(first.in_channels) if first is not None else 3


def is_norm(module: nn.Module) -> bool:
    """A normalization layer: torch's own, or a leaf module whose class is named like one."""
    if isinstance(module, (nn.LayerNorm, nn.GroupNorm, nn.modules.batchnorm._BatchNorm)):
        return True
    return not any(True for _ in module.children()) and bool(NORM_NAME.search(type(module).__name__))
