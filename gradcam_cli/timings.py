"""Wall-clock stamps of a run's phases, for `benchmarks/startup.py` (and anyone asking where the wait goes).

Off unless the environment names a file in GRADCAM_TIMINGS: then each phase's
end is stamped (`time.time()`, so the benchmark can set them against the moment
it started the process) and the stamps are written there as one JSON object
when the process exits. Costs nothing otherwise: one dictionary lookup per stamp.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import time

ENVIRONMENT = "GRADCAM_TIMINGS"
_stamps: dict[str, float] = {}


def stamp(phase: str) -> None:
    """The end of `phase`, first time only (a phase that repeats, as batches do, is stamped when it first ends)."""
    if not os.environ.get(ENVIRONMENT) or phase in _stamps:
        return
    if not _stamps:
        atexit.register(_write)
    _stamps[phase] = time.time()


def _write() -> None:
    path = os.environ.get(ENVIRONMENT)
    if not path:
        return
    try:
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(_stamps, handle)
    except OSError as error:  # at exit, after the run's own outcome: one line, never a traceback
        print(f"gradcam: {ENVIRONMENT}={path}: cannot write the timings ({error.strerror or error})", file=sys.stderr)
