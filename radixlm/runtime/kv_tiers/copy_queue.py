"""Tier copies off the scheduler's path: a background thread runs them, a completion check waits.

A copy's source (pool slots) and destination (host rows) must not be reused before it has run. The
owner keeps the ``CopyTask`` and calls ``wait`` before freeing either: a copy the thread has finished
returns at once, one it is running is waited for, and one it has not reached yet runs right there on
the caller's thread (so a completion check never queues behind unrelated copies).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable


class CopyTask:
    """One copy, run exactly once: by the queue's thread or by the first ``wait``, whichever is first."""

    def __init__(self, fn: Callable[[], None]) -> None:
        self._fn: Callable[[], None] | None = fn
        self._lock = threading.Lock()
        self._error: BaseException | None = None

    @property
    def done(self) -> bool:
        return self._fn is None

    def run(self) -> None:
        with self._lock:
            fn, self._fn = self._fn, None
            if fn is not None:
                try:
                    fn()
                except Exception as exc:  # reported by ``wait``: the copied rows are not to be trusted
                    self._error = exc

    def wait(self) -> None:
        """Return once the copy has run (running it now if nobody has); re-raise its error."""
        self.run()
        if self._error is not None:
            raise RuntimeError("a KV tier copy failed") from self._error


class CopyQueue:
    """A daemon thread running submitted copies in order. ``pause`` holds it (copies then run only
    through ``wait``); ``close`` runs what is left and stops it."""

    def __init__(self, name: str = "kv-tier-copies") -> None:
        self._queue: queue.SimpleQueue[CopyTask | None] = queue.SimpleQueue()
        self._running = threading.Event()
        self._running.set()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[], None]) -> CopyTask:
        task = CopyTask(fn)
        self._queue.put(task)
        return task

    def pause(self) -> None:
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    def close(self) -> None:
        self.resume()
        self._queue.put(None)
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        while True:
            task = self._queue.get()
            if task is None:
                return
            self._running.wait()
            task.run()  # errors stay in the task for its ``wait``
