"""Waiting for a condition in tests: poll it until a deadline, never sleep a fixed time and hope.

``wait_until(lambda: server.ready(), 10, "the server to be ready")`` returns the predicate's first
truthy value, or raises ``TimeoutError`` naming what it waited for. ``what`` may be a function, called
at the timeout, to say what was last seen.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
Description = str | Callable[[], str]

POLL_INTERVAL_S = 0.02


def wait_until(
    predicate: Callable[[], T], timeout: float, what: Description, interval: float = POLL_INTERVAL_S
) -> T:
    """Poll ``predicate`` every ``interval`` seconds until it returns something truthy (returned);
    ``TimeoutError("timed out after Ns waiting for <what>")`` when ``timeout`` passes first."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise _timed_out(timeout, what)
        time.sleep(interval)


async def async_wait_until(
    predicate: Callable[[], T], timeout: float, what: Description, interval: float = POLL_INTERVAL_S
) -> T:
    """``wait_until`` for a coroutine: the event loop keeps running between polls."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise _timed_out(timeout, what)
        await asyncio.sleep(interval)


def _timed_out(timeout: float, what: Description) -> TimeoutError:
    return TimeoutError(f"timed out after {timeout:g} s waiting for {what() if callable(what) else what}")
