"""A streamed request's results as the Engine hands them out: read with ``for`` or ``async for``.

Both read through ``ResultStream._take``, the one loop body of Engine streaming; the two classes
only differ in how they wait for the next result.
"""

from __future__ import annotations

import asyncio
import queue
from collections.abc import AsyncIterator, Callable, Iterator

from radixlm.runtime.engine.loop import EngineError
from radixlm.runtime.engine.tracker import Sink

# Hands the request to the loop with the sink its results go to (raises when the loop is gone).
Submit = Callable[[Sink], object]


class ResultStream:
    """The cumulative results of one request, in order, ending with its final one.

    The request is submitted on the first read. A result carrying an error raises it (``ValueError``
    for a 400, else ``RuntimeError``), and a loop that stopped raises ``EngineError``; either ends
    the stream.
    """

    def __init__(self, submit: Submit, loop_error: Callable[[], BaseException | None]) -> None:
        self._submit = submit
        self._loop_error = loop_error
        self._submitted = False
        self._finished = False

    def _start(self, sink: Sink) -> None:
        self._submitted = True
        self._finished = True  # until the submission succeeds: a failed one ends the stream
        self._submit(sink)
        self._finished = False

    def _take(self, item: dict | None) -> dict:
        """The loop body: check one result from the loop's sink (None: the loop stopped)."""
        if item is None:
            self._finished = True
            raise EngineError("the engine stopped") from self._loop_error()
        self._finished = is_final(item)
        raise_for_error(item)
        return item


class SyncResultStream(ResultStream, Iterator[dict]):
    """``Engine.generate(stream=True)``: blocks the calling thread for each result."""

    _items: queue.Queue[dict | None]

    def __next__(self) -> dict:
        if not self._submitted:
            self._items = queue.Queue()
            self._start(self._items.put)
        if self._finished:
            raise StopIteration
        return self._take(self._items.get())


class AsyncResultStream(ResultStream, AsyncIterator[dict]):
    """``Engine.async_generate(stream=True)``: the loop thread hands results to the reader's event loop."""

    _items: asyncio.Queue[dict | None]

    async def __anext__(self) -> dict:
        if not self._submitted:
            loop = asyncio.get_running_loop()
            items: asyncio.Queue[dict | None] = asyncio.Queue()
            self._items = items

            def sink(item: dict | None) -> None:  # runs on the loop thread
                loop.call_soon_threadsafe(items.put_nowait, item)

            self._start(sink)
        if self._finished:
            raise StopAsyncIteration
        return self._take(await self._items.get())


def is_final(result: dict) -> bool:
    """Whether ``result`` is a request's last: it finished or failed."""
    return result["meta_info"].get("finish_reason") is not None or "error" in result


def raise_for_error(result: dict) -> None:
    """Raise the error ``result`` carries: ``ValueError`` for the caller's fault (400), else
    ``RuntimeError``."""
    err = result.get("error")
    if err is None:
        return
    if err.get("status_code") == 400:
        raise ValueError(err.get("message", "invalid request"))
    raise RuntimeError(f"request {result['meta_info'].get('id')} failed: {err.get('message')}")
