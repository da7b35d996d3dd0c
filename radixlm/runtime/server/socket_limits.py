"""Limits at the socket, below the ASGI app: what a client holds before any route runs.

uvicorn's h11 protocol starts no timer until a first response is sent, so a client that sends its
headers a byte at a time (slowloris) keeps its socket, and its file descriptor, for as long as it
likes. ``guarded_h11`` adds a header deadline (``--header-timeout``: the headers of each request must
be complete that long after the connection opened or the previous response ended) and closes
connections beyond ``--max-connections`` as they open. The body's deadline (``--body-timeout``) is
the front door's (``front_door.py``); idle keep-alive connections close after
``--timeout-keep-alive`` (uvicorn's).
"""

from __future__ import annotations

import asyncio
import logging
import resource
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

logger = logging.getLogger(__name__)
FD_RESERVE = 64  # descriptors left for the process itself (ZMQ sockets, model files, logs)


def connection_limit(requested: int) -> int:
    """``requested``, lowered below this process's file-descriptor limit if needed."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and requested > soft - FD_RESERVE:
        limit = max(soft - FD_RESERVE, 1)
        logger.warning("--max-connections %d is above the fd limit %d: using %d", requested, soft, limit)
        return limit
    return requested


def guarded_h11(max_connections: int, header_timeout: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol with a connection cap and a header deadline (see the module doc)."""

    class GuardedH11Protocol(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None
        _armed_cycle: Any = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                transport.close()
                return
            self._arm()

        def _arm(self) -> None:
            self._armed_cycle = self.cycle
            self._header_timer = self.loop.call_later(header_timeout, self._headers_late)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_late(self) -> None:
            self._header_timer = None
            waiting = self.cycle is self._armed_cycle and (self.cycle is None or self.cycle.response_complete)
            if waiting and not self.transport.is_closing():
                self.transport.close()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.cycle is not self._armed_cycle:  # a new request's headers are complete
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._disarm()
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    return GuardedH11Protocol
