"""Work that scales with a request's size runs off the HTTP event loop, in a bounded thread pool.

Tokenizing a long prompt or a large batch, detokenizing, compiling a request's regexes: done inline,
one large request would stall every stream and ``/health`` for as long as it takes. The pool has
``OFFLOAD_THREADS`` threads and at most ``OFFLOAD_QUEUE`` jobs waiting; beyond that the request is
refused with 503 (the work is admitted before it is queued, never queued without a bound).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from radixlm.runtime.server.errors import ApiError

T = TypeVar("T")
OFFLOAD_THREADS = 2
OFFLOAD_QUEUE = 64  # jobs in the pool (running and waiting) before further ones get a 503
INLINE_CHARS = 8192  # smaller jobs cost less than the thread hop and stay on the loop
RETRY_AFTER_S = 1

_pool = ThreadPoolExecutor(max_workers=OFFLOAD_THREADS, thread_name_prefix="radixlm-offload")
_in_pool = 0


async def off_loop(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in the pool; its exceptions propagate. 503 when the pool is full."""
    global _in_pool
    if _in_pool >= OFFLOAD_QUEUE:
        raise ApiError(
            f"the server is busy ({OFFLOAD_QUEUE} tokenization jobs queued); retry later",
            503,
            headers={"Retry-After": str(RETRY_AFTER_S)},
        )
    _in_pool += 1
    try:
        return await asyncio.get_running_loop().run_in_executor(_pool, functools.partial(fn, *args))
    finally:
        _in_pool -= 1


async def maybe_off_loop(size: int, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` inline when ``size`` (characters or tokens) is small, else in the pool."""
    return fn(*args) if size <= INLINE_CHARS else await off_loop(fn, *args)


def regex_chars(body: Any) -> int:
    """Characters of the regexes a ``/generate`` body's ``sampling_params`` hold (compiled while
    parsing it): what decides whether parsing runs off the loop."""
    params = body.get("sampling_params") if isinstance(body, dict) else None
    total = 0
    for p in params if isinstance(params, list) else [params]:
        if isinstance(p, dict):
            for key in ("stop_regex", "regex"):
                value = p.get(key)
                for pattern in value if isinstance(value, list) else [value]:
                    total += len(pattern) if isinstance(pattern, str) else 0
    return total
