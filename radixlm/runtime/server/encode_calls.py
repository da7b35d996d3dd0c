"""The embedding requests (``EncodeReq``) in flight from the server, each answered by its own rid.

Every request waits on a future keyed by its rid, so a request abandoned by its client (which the
scheduler is told to abort) never takes a later request's answer; a client rid (``/encode``'s
``rid``) can be aborted by ``/abort_request`` while it runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from radixlm.runtime.messages import AbortReq, EncodeOut, EncodeReq
from radixlm.runtime.server.errors import ApiError


class EncodeCalls:
    """The futures of the ``EncodeReq`` in flight, by rid."""

    def __init__(self, send: Callable[[Any], Awaitable[None]]) -> None:
        self._send = send  # to the scheduler (nothing is sent once the server is failing)
        self._futures: dict[str, asyncio.Future[EncodeOut]] = {}

    def __contains__(self, rid: str) -> bool:
        return rid in self._futures

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._futures))

    def __len__(self) -> int:
        return len(self._futures)

    def open(self, rid: str) -> asyncio.Future[EncodeOut]:
        """The future ``rid``'s answer will complete; 400 when a request with that rid is in flight."""
        if rid in self._futures:
            raise ApiError(f"a request with rid {rid!r} is already running", param="rid")
        future: asyncio.Future[EncodeOut] = asyncio.get_running_loop().create_future()
        self._futures[rid] = future
        return future

    def close(self, rid: str) -> None:
        """Forget ``rid`` (answered, or its client left); a later answer for it is dropped."""
        self._futures.pop(rid, None)

    def resolve(self, out: EncodeOut) -> None:
        future = self._futures.pop(out.rid, None)
        if future is not None and not future.done():
            future.set_result(out)

    def fail_all(self, error: ApiError) -> None:
        for future in self._futures.values():
            if not future.done():
                future.set_exception(error)
        self._futures.clear()

    async def call(self, req: EncodeReq) -> EncodeOut:
        """Send ``req`` and await its answer. Cancelled (its client left), it is aborted in the
        scheduler: its queued sequences are dropped and the KV they hold freed."""
        future = self.open(req.rid)
        try:
            await self._send(req)
            return await future
        except asyncio.CancelledError:
            await asyncio.shield(self._send(AbortReq(req.rid)))
            raise
        finally:
            self.close(req.rid)
