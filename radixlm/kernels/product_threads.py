"""How many threads our own product kernels take when a caller sets it apart from torch's count.

An encoder forward of a few dozen tokens is fastest with its products on two threads and torch's own
small ops (LayerNorm, GELU, attention) on one: each of those waits at an OpenMP barrier for a
second thread that our product kernels' helper has just left spinning (batch-1 MiniLM, same
process: 7.35 ms a request split so, 9.4 ms all on two threads, 10.4 ms all on one;
benchmarks/log/embeddings.md). ``with product_threads(n):`` sets the count for the calling thread;
``linear`` passes ``current()`` to the panel and small-batch kernels (None: torch's count).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

_local = threading.local()


@contextlib.contextmanager
def product_threads(threads: int | None) -> Iterator[None]:
    """Our product kernels use ``threads`` threads in this block, on this thread (None: torch's)."""
    before = getattr(_local, "threads", None)
    _local.threads = threads
    try:
        yield
    finally:
        _local.threads = before


def current() -> int | None:
    """The count ``product_threads`` set for this thread, or None."""
    return getattr(_local, "threads", None)
