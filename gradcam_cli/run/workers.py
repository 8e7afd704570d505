"""Background threads for the work around the model: decoding before it, writing after it.

JPEG/PNG decoding (PIL), resizing and PNG encoding (OpenCV) release the GIL,
so a few threads overlap them with the model's forward and backward instead
of leaving the cores idle between batches. Results keep the input order, and
only a bounded window of work is ever in flight, so memory does not grow with
the number of inputs.
"""

from __future__ import annotations

import os
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar
from collections.abc import Callable, Generator, Iterable, Iterator

T = TypeVar("T")
R = TypeVar("R")

CPU_MODEL_WORKERS = 4  # the model needs the cores too
ACCELERATOR_WORKERS = 16  # a GPU outruns decoding and PNG encoding: give them the cores


def default_workers(device_type: str = "cpu") -> int:
    """Threads for decoding and writing: enough to hide I/O, few enough to leave a CPU model its cores."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    cap = CPU_MODEL_WORKERS if device_type == "cpu" else ACCELERATOR_WORKERS
    return max(1, min(cap, cores))


def ordered_map(pool: ThreadPoolExecutor, fn: Callable[[T], R], items: Iterable[T], window: int) -> Generator[R, None, None]:
    """fn over items in the pool, results in input order, at most `window` running ahead.

    Closed early (a stop), the work queued ahead that has not started is cancelled.
    """
    pending: deque[Future[R]] = deque()
    try:
        for item in items:
            pending.append(pool.submit(fn, item))
            if len(pending) >= window:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for future in pending:
            future.cancel()


class OrderedResults:
    """Futures handed out in submission order as they complete, with a bound on how many wait."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._pending: deque[Future] = deque()

    def add(self, future: Future) -> None:
        self._pending.append(future)

    def ready(self) -> Iterator[object]:
        """Finished results at the head; blocks only while more than `limit` are waiting."""
        while self._pending and (self._pending[0].done() or len(self._pending) > self.limit):
            yield self._pending.popleft().result()

    def finished(self) -> Iterator[object]:
        """After a stop: the results at the head that completed, in order, up to the first that did not."""
        while self._pending and self._pending[0].done() and not self._pending[0].cancelled():
            future = self._pending.popleft()
            if future.exception() is not None:
                break
            yield future.result()

    def rest(self) -> Iterator[object]:
        while self._pending:
            yield self._pending.popleft().result()


def done(value: R) -> Future[R]:
    """A future that already holds its result (error records need no thread)."""
    future: Future[R] = Future()
    future.set_result(value)
    return future
