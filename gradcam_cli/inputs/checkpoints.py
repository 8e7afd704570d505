"""A sweep of checkpoints: ⟨weights⟩ given as a pattern (`ckpts/epoch=*.ckpt`) names several, explained in turn.

Each checkpoint gets its training step from its name, as Lightning names them (`epoch=3-step=1200.ckpt`: step
1200), so trackers show the maps along the training's own axis; names without one are numbered in order.
Torch-free: the pattern is read before any model loads.
"""

from __future__ import annotations

import glob
import re
from dataclasses import dataclass
from pathlib import Path

from gradcam_cli.errors import UsageError

PATTERN_CHARS = frozenset("*?[")
STEP_KEYS = ("step", "epoch")  # Lightning's ModelCheckpoint names: `epoch=3-step=1200.ckpt`; the step when both are there


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint of a sweep, its step, and the subfolder of the output folder its outputs go to."""

    path: Path
    step: int
    folder: str


def swept_checkpoints(weights: Path | None) -> list[Checkpoint] | None:
    """The checkpoints a ⟨weights⟩ pattern names, ordered by step; None when it is no pattern (or a file has that very
    name). A pattern that names no file is one line."""
    if weights is None or not PATTERN_CHARS & set(str(weights)) or weights.exists():
        return None
    paths = sorted(Path(p) for p in glob.glob(str(weights), recursive=True) if Path(p).is_file())
    if not paths:
        raise UsageError(f"⟨weights={weights}⟩: the pattern names no file; give a checkpoint or a pattern such as 'ckpts/*.ckpt'")
    steps = _steps(paths)
    folders = _folders(paths)
    return sorted((Checkpoint(path, step, folder) for path, step, folder in zip(paths, steps, folders)), key=lambda c: c.step)


def _steps(paths: list[Path]) -> list[int]:
    """Each name's `step=N`, else its `epoch=N`, else (names with neither) its last number, when every name has one
    and no two agree; else 0, 1, 2... in the names' natural order."""
    keyed = False
    for key in STEP_KEYS:
        found = [re.search(rf"(?:^|[^a-z]){key}=(\d+)", path.stem, re.IGNORECASE) for path in paths]
        keyed = keyed or any(found)
        if all(found) and _distinct([int(m.group(1)) for m in found if m]):
            return [int(m.group(1)) for m in found if m]
    numbers = [re.findall(r"\d+", path.stem) for path in paths]
    if not keyed and all(numbers) and _distinct([int(n[-1]) for n in numbers]):
        return [int(n[-1]) for n in numbers]
    order = sorted(range(len(paths)), key=lambda i: _natural(paths[i].name))
    return [order.index(i) for i in range(len(paths))]


def _distinct(values: list[int]) -> bool:
    return len(set(values)) == len(values)


def _natural(name: str) -> list[object]:
    """`epoch9` before `epoch10`."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _folders(paths: list[Path]) -> list[str]:
    """Each checkpoint's subfolder: its file's stem, its parent's name too when two stems agree."""
    stems = [path.stem for path in paths]
    return [f"{path.parent.name}-{path.stem}" if stems.count(path.stem) > 1 else path.stem for path in paths]
