"""The user's class names file (--labels)."""

from __future__ import annotations

from pathlib import Path

from gradcam_cli.errors import UsageError
from gradcam_cli.model.messages import short


def read_labels(path: Path) -> list[str]:
    """One class name per line; byte-order marks (Windows editors write one) are no part of a name."""
    if not path.is_file():
        raise UsageError(f"⟨labels={path}⟩: no such file")
    try:
        lines = path.read_text(encoding="utf-8-sig").replace("\ufeff", "").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"⟨labels={path}⟩: cannot read it as UTF-8 text ({short(error)})") from None
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise UsageError(f"⟨labels={path}⟩ is empty; write one class name per line")
    return [line.strip() for line in lines]
