"""SIGTERM under load: stop taking requests, let those in flight finish, then stop.

uvicorn's own SIGTERM handling closes connections after a timeout, cutting streams mid-body. Here
the first SIGTERM only starts draining: new requests get 503 (with ``Retry-After``), ``/health``
turns 503, requests in flight get ``--shutdown-grace-s`` to finish; what is still running then ends
with an error (a stream gets an error event and ``[DONE]``), and the server exits. A second
SIGTERM or a SIGINT stops at once, as before.
"""

from __future__ import annotations

import asyncio
import signal
from types import FrameType
from typing import Any

import uvicorn

from radixlm.runtime.server.errors import ApiError

DRAIN_POLL_S = 0.1
FLUSH_S = 0.5  # lets the streams write their final error event before the connections close


class DrainingServer(uvicorn.Server):
    """A ``uvicorn.Server`` whose first SIGTERM drains the ``TokenizerManager``'s requests."""

    def __init__(self, config: uvicorn.Config, tokenizer_manager: Any, grace_s: float) -> None:
        super().__init__(config)
        self.tokenizer_manager = tokenizer_manager
        self.grace_s = grace_s
        self._drain_task: Any | None = None  # a concurrent.futures.Future
        self._loop: asyncio.AbstractEventLoop | None = None

    async def serve(self, sockets: Any = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig == signal.SIGTERM and self._drain_task is None and self._loop is not None:
            self._captured_signals.append(sig)
            self._drain_task = asyncio.run_coroutine_threadsafe(self._drain(), self._loop)
            return
        super().handle_exit(sig, frame)

    async def _drain(self) -> None:
        tm = self.tokenizer_manager
        tm.admission.draining = "received SIGTERM"
        deadline = self._loop.time() + self.grace_s
        while tm.num_pending and self._loop.time() < deadline:
            await asyncio.sleep(DRAIN_POLL_S)
        if tm.num_pending:
            tm.fail_pending(
                ApiError(
                    f"the server is shutting down: the request did not finish within "
                    f"the {self.grace_s:g} s grace period",
                    503,
                )
            )
            await asyncio.sleep(FLUSH_S)
        self.should_exit = True
