"""Pieces of the one-line messages that the hubs and loaders share."""

from __future__ import annotations

import difflib


def short(error: BaseException, limit: int = 200) -> str:
    """An exception's first line, clipped: library errors can run to pages."""
    text = str(error).strip().splitlines()
    return (text[0] if text else type(error).__name__)[:limit]


def closest(name: str, choices: list[str]) -> str:
    """' (did you mean ...?)' for a mistyped model name, or nothing when none is close."""
    close = difflib.get_close_matches(name, choices, n=3, cutoff=0.6)
    return f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
