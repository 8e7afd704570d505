"""The small readers every file of boxes shares: its text, a number in a cell, an offending value shown in a message.

⟨boxes⟩ (inputs/regions.py) and a detector's ⟨truth⟩ (inputs/detection_truth.py,
inputs/yolo_labels.py) read CSV, JSON and label files written by hand or by
other tools; each refuses the same things in the same words.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path

from gradcam_cli.errors import GradcamError, UsageError, cut, printable
from gradcam_cli.inputs.decode import open_regular

SHOWN = 40  # characters of an offending value in a message


def read_text(path: Path, mark: str, hint: str, *, named: bool = True) -> str:
    """A small text file's UTF-8 text (a BOM dropped); one UsageError line when it cannot be read.

    `named`: the message names the file (a label file inside a folder); False where `mark` names it already.
    """
    which = f"{printable(str(path))} is " if named else ""
    try:
        with open_regular(path) as handle:
            return handle.read().decode("utf-8-sig")
    except UnicodeDecodeError:
        raise UsageError(f"{mark}: {which}not UTF-8 text (a binary file?)", hint=hint) from None
    except GradcamError:
        raise UsageError(f"{mark}: {which}not a regular file", hint=hint) from None
    except OSError as error:
        raise UsageError(f"{mark}: cannot read {printable(str(path)) if named else 'it'} ({error.strerror or error})", hint=hint) from None


def finite_number(value: object) -> float | None:
    """A finite number from a CSV cell or a JSON value; None for anything else (true/false is no coordinate)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        number = float(value)
    except (ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def shown(value: object) -> str:
    """An offending value, short and on one line, in backticks."""
    try:
        text = value if isinstance(value, str) else json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        text = type(value).__name__
    return f"`{cut(printable(text), SHOWN)}`"


def csv_rows(text: str, mark: str, hint: str, is_header: Callable[[list[str]], bool]) -> Iterator[tuple[int, list[str]]]:
    """Each row's line number and its cells stripped: blank rows left out, and the first row when it is a header;
    text that is not CSV is one UsageError line naming the row."""
    reader = csv.reader(io.StringIO(text))
    first = True
    try:
        for row in reader:
            cells = [cell.strip() for cell in row]
            if not any(cells):
                continue
            header, first = first and is_header(cells), False
            if not header:
                yield reader.line_num, cells
    except csv.Error as error:
        raise UsageError(f"{mark} row {reader.line_num}: not CSV ({error})", hint=hint) from None
