"""Ctrl-C and SIGTERM as a request to stop at the next safe point, not an exception at any bytecode.

An exception raised from a signal handler can land inside a `with lock:`
before its cleanup is in place and leave the lock held; the thread pool then
waits on that lock for ever on the way out. So while images stream, a signal
only records the request and says at once on stderr that the run is stopping;
the engine stops at its next checkpoint (between images, between chunks of
masked forwards), still writing every image whose maps are done. Where the wait may be
long and holds no lock of ours (loading the model, reading paths from stdin),
it is raised at once. A second signal while one waits ends the process at
once: every output name still holds a whole file (files are renamed into
place), and a temporary file it may leave is cleared by the next run.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Any, TypeVar
from collections.abc import Iterable, Iterator

from gradcam_cli.errors import ExitCode, Interrupted

T = TypeVar("T")

STOPPING_MESSAGE = "stopping ({signal}): the images whose maps are done are still written; {signal} again stops at once"

INTERRUPTED_MESSAGE = "interrupted by {signal}; every file written is complete; re-run with --skip-existing to do the rest"
HANDLED: dict[int, tuple[str, ExitCode]] = {
    signal.SIGINT: ("Ctrl-C", ExitCode.INTERRUPTED),
    signal.SIGTERM: ("SIGTERM", ExitCode.TERMINATED),
}


def interrupted(signum: int = signal.SIGINT) -> Interrupted:
    name, code = HANDLED.get(signum, HANDLED[signal.SIGINT])
    return Interrupted(INTERRUPTED_MESSAGE.format(signal=name), code)


def _say_at_once(message: str) -> None:
    """A line on stderr from the signal handler: one system call, no lock of Python's buffered streams.

    The handler runs within moments of the signal, also in the middle of a long forward pass, so the user
    hears at once that the run is stopping; the stop itself waits for the next checkpoint. On a terminal
    the progress line is cleared first (it is drawn again below).
    """
    try:
        clear = "\r\x1b[2K" if os.isatty(2) else ""
        os.write(2, f"{clear}gradcam: {message}\n".encode())
    except OSError:
        pass  # no stderr to tell: the stop goes on all the same


class StopRequests:
    """While inside: SIGINT and SIGTERM are requests, raised at `checkpoint()` (or at once where that is safe)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.count = 0
        self._raise_at_once = True
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopRequests:
        if threading.current_thread() is threading.main_thread():
            self._previous = {signum: signal.signal(signum, self._handle) for signum in HANDLED}
        return self

    def __exit__(self, *_exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum: int, _frame: Any) -> None:
        self.signum = signum
        self.count += 1
        if self._raise_at_once:
            raise interrupted(signum)
        if self.count > 1:  # asked twice: no exception here (it could leave a lock held), the process ends
            error = interrupted(signum)
            os.write(sys.stderr.fileno(), f"gradcam: {error} (stopped at once: asked twice)\n".encode())
            os._exit(int(error.exit_code))
        _say_at_once(STOPPING_MESSAGE.format(signal=HANDLED.get(signum, HANDLED[signal.SIGINT])[0]))

    def checkpoint(self) -> None:
        """Where the engine may stop: raise the request if one came."""
        if self.signum is not None:
            raise interrupted(self.signum)

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """Inside, a first signal waits for the next checkpoint."""
        self._raise_at_once = False
        try:
            yield
        finally:
            self._raise_at_once = True
        self.checkpoint()

    def at_once(self, items: Iterable[T]) -> Iterator[T]:
        """Iterate with signals raised at once: producing the next item (reading stdin) may block for ever."""
        iterator = iter(items)
        while True:
            before, self._raise_at_once = self._raise_at_once, True
            try:
                if self.signum is not None:
                    raise interrupted(self.signum)
                item = next(iterator)
            except StopIteration:
                return
            finally:
                self._raise_at_once = before
            yield item
