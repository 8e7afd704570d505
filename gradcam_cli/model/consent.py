"""Consent to run the code inside a pickled model file, held while a model is built.

A pickle is a program: unpickling an Ultralytics `.pt` runs whatever it says.
The user says they trust the file with ⟨trust_pickle⟩; the loader holds that
for the build (a context variable, so every hub's `build` keeps its signature)
and a hub that would unpickle asks `pickles_trusted()` first.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

_TRUSTED: ContextVar[bool] = ContextVar("gradcam_trusted_pickles", default=False)


@contextlib.contextmanager
def trusting_pickles(trust: bool) -> Iterator[None]:
    """Pickles trusted (or not) while inside; as before on the way out."""
    token = _TRUSTED.set(bool(trust))
    try:
        yield
    finally:
        _TRUSTED.reset(token)


def pickles_trusted() -> bool:
    return _TRUSTED.get()
