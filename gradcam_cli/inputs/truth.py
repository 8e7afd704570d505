"""Ground truth: which class each input really is, from its folder or from a CSV file.

The common ImageFolder layout (`val/<class name>/img.jpg`) says it by the
folder an image sits in, matched to the model's class names; `--truth
FILE.csv` (`path,class`) says it for any layout. Records then carry
`true_class` and `correct`, and the report opens on the wrong ones. Models
are not known here: the caller passes the class names (and their aliases,
such as ImageNet's WordNet ids, which are the folder names of ImageNet's own
layout).
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gradcam_cli.errors import UsageError
from gradcam_cli.inputs.paths_table import PathTable

UNKNOWN_SHOWN = 5  # class names of a truth file the model does not know, named in the warning


@dataclass(frozen=True)
class Truth:
    """An input's true class: its name as the truth gives it, and its index when the model has that class."""

    name: str
    index: int | None


def normalised(name: str) -> str:
    """A class name as folder names and CSV files spell it: case, `_`, `-` and repeated spaces do not matter."""
    return re.sub(r"[\s_\-]+", " ", name).strip().casefold()


class ClassIndex:
    """The model's classes by every spelling that names one: the full name, each comma-separated synonym, an alias."""

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

    def find(self, spelling: str) -> int | None:
        """The class a name (or an index written as digits) means, or None."""
        index = self._by_spelling.get(normalised(spelling))
        if index is None and spelling.strip().isdigit() and int(spelling) < len(self.names):
            index = int(spelling)
        return index

    def truth(self, spelling: str) -> Truth:
        index = self.find(spelling)
        return Truth(self.names[index] if index is not None else spelling.strip(), index)


@dataclass
class TruthTable(PathTable[Truth]):
    """A truth file's rows, found by input path as inputs/paths_table.py matches them, and the classes the model lacks."""

    unknown: list[str] = field(default_factory=list)  # true classes the model does not have


class GroundTruth:
    """The true class of each input: a truth file's row for it, else its folder's name when that is a class."""

    def __init__(self, classes: ClassIndex, table: TruthTable | None = None) -> None:
        self.classes = classes
        self.table = table

    def of(self, path: Path) -> Truth | None:
        """The true class of one input, or None when nothing says it."""
        if self.table is not None:
            return self.table.find(path)
        folder = path.parent.name
        index = self.classes.find(folder) if folder and not folder.isdigit() else None
        return Truth(self.classes.names[index], index) if index is not None else None


def read_truth_file(path: Path, classes: ClassIndex) -> TruthTable:
    """`path,class` rows (a header row is allowed) → the table, and the true classes the model lacks.

    A relative path in the file is taken from the file's own folder and, as
    well, from the current one, so both habits work; a bare file name (Kaggle's
    `id,label`) matches an input of that name when no other row has it.
    """
    table = TruthTable()
    unknown: dict[str, None] = {}
    for number, row in enumerate(_csv_rows(path), start=1):
        if len(row) < 2 or not row[0].strip() or not row[1].strip():
            raise UsageError(f"⟨truth={path}⟩ row {number}: expected `path,class`, got {','.join(row)!r}")
        truth = classes.truth(row[1])
        if truth.index is None:
            unknown.setdefault(truth.name, None)
        table.add(row[0].strip(), truth, (path.parent, Path.cwd()))
    table.unknown = list(unknown)
    return table


def _csv_rows(path: Path) -> list[list[str]]:
    """The file's rows, without a header row and blank lines; one clear line when it cannot be read."""
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            rows = [row for row in csv.reader(handle) if any(cell.strip() for cell in row)]
    except FileNotFoundError:
        raise UsageError(f"⟨truth={path}⟩: no such file; give a CSV file of `path,class` rows") from None
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise UsageError(f"⟨truth={path}⟩: cannot read it as CSV text ({error})") from None
    if rows and [cell.strip().lower() for cell in rows[0][:2]] in (["path", "class"], ["path", "label"], ["file", "class"]):
        rows = rows[1:]
    if not rows:
        raise UsageError(f"⟨truth={path}⟩ has no rows; write one `path,class` row per image")
    return rows


def load_ground_truth(
    truth_file: Path | None,
    class_names: Sequence[str] | None,
    aliases: Sequence[str] | None,
    warn: Callable[[str], None] = lambda _m: None,
) -> GroundTruth:
    """The run's ground truth: the file's, or the folder layout's (which says nothing where no folder is a class)."""
    classes = ClassIndex(class_names, aliases)
    if truth_file is None:
        return GroundTruth(classes)
    table = read_truth_file(truth_file, classes)
    unknown = table.unknown
    if unknown:
        shown = ", ".join(unknown[:UNKNOWN_SHOWN]) + (f" and {len(unknown) - UNKNOWN_SHOWN} more" if len(unknown) > UNKNOWN_SHOWN else "")
        known = "the model has no class names; give them with ⟨labels⟩" if not classes.names else "those images count as wrong"
        warn(f"{truth_file}: {len(unknown)} true class(es) the model does not know ({shown}); {known}")
    return GroundTruth(classes, table)
