"""``--queue-timeout``: a request that waited longer than this for admission fails with a clear error
(503) instead of waiting on behind a backlog its client has long given up on."""
from __future__ import annotations

import time
from typing import Callable, Optional

from radixlm.runtime.scheduler.finish_reason import FinishAbort, FinishReason
from radixlm.runtime.scheduler.req import Req

QUEUE_TIMEOUT_STATUS = 503


Finish = Callable[[Req, FinishReason], None]


def expire_waiting(waiting: list[Req], timeout_s: Optional[float], finish: Finish,
                   now: Optional[float] = None) -> None:
    """Finish (and drop from ``waiting``) every never-admitted request older than ``timeout_s``.

    Requests that already produced tokens (retracted ones) keep their place: they were admitted.
    """
    if not timeout_s or not waiting:
        return
    now = time.monotonic() if now is None else now
    for req in [r for r in waiting if not r.admitted_once and now - r.arrived_at > timeout_s]:
        waiting.remove(req)
        finish(req, FinishAbort(f"the request waited more than {timeout_s:g} s for admission "
                                "(--queue-timeout); the server is overloaded, retry later",
                                QUEUE_TIMEOUT_STATUS))
