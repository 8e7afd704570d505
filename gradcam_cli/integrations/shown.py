"""`Shown`: one logged picture and the names a tracker files it under; its own module, so the grid and the snapshot
that both make them import it without importing each other."""

from __future__ import annotations

from dataclasses import dataclass

from PIL import Image


@dataclass(frozen=True)
class Shown:
    """One image's overlay for one class, with the names a tracker files it under."""

    image: str  # the file's stem, else the image's index
    class_index: int
    class_name: str
    probability: float
    overlay: Image.Image  # a grid's: the whole grid picture
    method: str = ""  # what made the overlay; a grid's: "" (its cells say)
    layer: str = ""
    cells: tuple[Shown, ...] = ()  # a grid's: each (method, layer)'s own, row by row, for the records
    boxes: tuple[tuple[tuple[int, int, int, int], ...], ...] = ()  # a grid's: where each cell is on it, [row][column]
