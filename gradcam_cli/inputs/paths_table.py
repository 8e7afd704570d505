"""Rows of a file that name inputs by path: the one rule by which `⟨truth⟩` and `⟨boxes⟩` files find their images.

People write such paths from wherever they stand: relative to the file's own
folder, relative to the folder they run in, or as a bare file name or stem
(Kaggle's `id,label`). A row's path matches an input given any of those ways;
a bare name or stem matches only when no other row shares it, so two
`cat.jpg` rows in different folders never guess.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

V = TypeVar("V")


@dataclass
class PathTable(Generic[V]):
    """A file's rows by path (as written, and made absolute from each base folder), and by bare name where unique."""

    _paths: dict[str, tuple[str, V]] = field(default_factory=dict)
    _names: dict[str, tuple[str, V] | None] = field(default_factory=dict)  # None: several rows share the name
    _written: dict[str, None] = field(default_factory=dict)  # every path as written, in file order

    def add(self, written: str, value: V, bases: Sequence[Path]) -> None:
        """One row: the last row of a path as written wins; a path reached from a base folder keeps its first row."""
        row = (written, value)
        self._written.setdefault(written, None)
        self._paths[os.path.normpath(written)] = row
        for base in bases:
            self._paths.setdefault(os.path.normpath(os.path.abspath(base / written)), row)
        base_name = os.path.basename(written)
        for short in dict.fromkeys((base_name, os.path.splitext(base_name)[0])):
            self._names[short] = row if short not in self._names else None

    def row(self, path: Path) -> tuple[str, V] | None:
        """The row that names this input: its path first, then its file name, then its stem."""
        for key in (os.path.normpath(os.path.abspath(path)), os.path.normpath(str(path))):
            if key in self._paths:
                return self._paths[key]
        for short in (path.name, path.stem):
            found = self._names.get(short)
            if found is not None:
                return found
        return None

    def find(self, path: Path) -> V | None:
        found = self.row(path)
        return found[1] if found is not None else None

    def unmatched(self, inputs: Iterable[Path]) -> list[str]:
        """The paths, as written, that name none of these inputs: a typo or a stale row, said once."""
        matched = {found[0] for found in map(self.row, inputs) if found is not None}
        return [written for written in self._written if written not in matched]
