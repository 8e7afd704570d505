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
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gradcam_cli.errors import UsageError, one_line
from gradcam_cli.inputs.paths_table import PathTable
from gradcam_cli.values import ClassIndex, class_index, normalised

UNKNOWN_SHOWN = 5  # class names of a truth file the model does not know, named in the warning

__all__ = ["ClassIndex", "GroundTruth", "Truth", "load_ground_truth", "read_truth_file"]  # ClassIndex: values.py's


@dataclass(frozen=True)
class Truth:
    """An input's true class: its name as the truth gives it, and its index when the model has that class."""

    name: str
    index: int | None


def truth_of(classes: ClassIndex, spelling: str, what: str = "class") -> Truth:
    """The truth a class spelling gives: the model's name for it when it has the class, else the spelling."""
    index = classes.find(spelling, what)
    return Truth(classes.names[index] if index is not None else spelling.strip(), index)


@dataclass
class TruthTable(PathTable[Truth]):
    """A truth file's rows, found by input path as inputs/paths_table.py matches them, and the classes the model lacks."""

    unknown: list[str] = field(default_factory=list)  # true classes the model does not have
    disagree: list[str] = field(default_factory=list)  # a path's later rows that name another class (the first counts)


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
    `id,label`) matches an input of that name when no other row has it. Where
    rows disagree on one path, the first counts and the table says which.
    """
    table = TruthTable()
    unknown: dict[str, None] = {}
    first: dict[str, tuple[int, Truth]] = {}
    for number, written, spelling in truth_rows(path):
        truth = truth_of(classes, spelling)
        earlier = first.setdefault(os.path.normpath(written), (number, truth))
        if earlier[0] != number:
            if not _same_class(earlier[1], truth):
                table.disagree.append(f"{written}: row {earlier[0]} says '{earlier[1].name}', row {number} '{truth.name}'")
            continue
        if truth.index is None:
            unknown.setdefault(truth.name, None)
        table.add(written, truth, (path.parent, Path.cwd()))
    table.unknown = list(unknown)
    return table


def truth_rows(path: Path) -> list[tuple[int, str, str]]:
    """(row number, path, class) of each row, checked as far as it can be without the model: the CLI reads them
    before the model loads, so a file that is not a truth file is one line at once."""
    rows = []
    for number, row in enumerate(_csv_rows(path), start=1):
        if len(row) < 2 or not row[0].strip() or not row[1].strip():
            raise UsageError(f"⟨truth={path}⟩ row {number}: expected `path,class`, got {one_line(','.join(row), 60)!r}")
        if len(row) >= 6:
            raise UsageError(
                f"⟨truth={path}⟩ row {number} holds a box (`path,class,x1,y1,x2,y2`): boxes are a detector's truth, and this "
                "model is a classifier; give `path,class` rows"
            )
        class_index(row[1], f"⟨truth={path}⟩ row {number}")
        rows.append((number, row[0].strip(), row[1].strip()))
    return rows


def _same_class(one: Truth, other: Truth) -> bool:
    """Two rows' truths name one class: the same index, or (the model lacking both) the same spelling."""
    if one.index is not None or other.index is not None:
        return one.index == other.index
    return normalised(one.name) == normalised(other.name)


def _csv_rows(path: Path) -> list[list[str]]:
    """The file's rows, without a header row and blank lines; one clear line when it cannot be read."""
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            rows = [row for row in csv.reader(handle) if any(cell.strip() for cell in row)]
    except FileNotFoundError:
        raise UsageError(f"⟨truth={path}⟩: no such file; give a CSV file of `path,class` rows") from None
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise UsageError(f"⟨truth={path}⟩: cannot read it as CSV text ({one_line(error, 120)})") from error
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
    if table.disagree:
        more = f" and {len(table.disagree) - 1} more" if len(table.disagree) > 1 else ""
        warn(f"{truth_file}: rows disagree on an image's class ({one_line(table.disagree[0], 120)}{more}); the first row counts")
    return GroundTruth(classes, table)
