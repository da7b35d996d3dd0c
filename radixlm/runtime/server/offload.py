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


REGEX_COST = 64  # validating a grammar character (regex, EBNF, schema) costs about this many tokenized ones
GRAMMAR_STRINGS = ("regex", "stop_regex", "ebnf", "json_schema", "structural_tag", "choices")
# grammars built from JSON objects: the OpenAI routes' tools and response formats, the Responses API's
# ``text`` (its format; a string ``text`` is a native prompt) and the Messages API's ``output_config``
GRAMMAR_OBJECTS = ("tools", "response_format", "output_config")


def body_cost(body: Any, body_bytes: int) -> int:
    """The work of validating a parsed body before tokenization, in characters of tokenizing: its bytes,
    and its grammar inputs (``GRAMMAR_STRINGS`` at the top level or in ``sampling_params``, tools,
    response formats) ``REGEX_COST`` times over. A grammar given as a JSON object counts the whole body
    at that rate: its size is not known without walking it, which is itself work on the loop."""
    if body_bytes > INLINE_CHARS or not isinstance(body, dict):
        return body_bytes
    params = body.get("sampling_params")
    holders = [body, *(params if isinstance(params, list) else [params])]
    grammar = 0
    for holder in holders:
        if not isinstance(holder, dict):
            continue
        objects = any(holder.get(key) is not None for key in GRAMMAR_OBJECTS)
        if objects or isinstance(holder.get("text"), dict):
            return body_bytes * REGEX_COST
        for key in GRAMMAR_STRINGS:
            value = holder.get(key)
            for text in value if isinstance(value, list) else [value]:
                if isinstance(text, str):
                    grammar += len(text)
                elif text is not None:
                    return body_bytes * REGEX_COST
    return body_bytes + grammar * REGEX_COST


def grammar_chars(params: Any) -> int:
    """Characters of the grammar inputs a ``SamplingParams`` holds (checked when its request is built)."""
    total = 0
    for key in GRAMMAR_STRINGS:
        value = getattr(params, key, None)
        for text in value if isinstance(value, list) else [value]:
            total += len(text) if isinstance(text, str) else 0
    return total
