"""``--queue-timeout``: a request that waited longer than this for admission, or for its grammar to
compile, fails with a clear error (503) instead of waiting on behind a backlog its client has long
given up on."""

from __future__ import annotations

import time
from collections.abc import Callable

from radixlm.runtime.scheduler.finish_reason import FinishAbort, FinishReason
from radixlm.runtime.scheduler.grammar_queue import GrammarQueue
from radixlm.runtime.scheduler.req import Req

QUEUE_TIMEOUT_STATUS = 503


Finish = Callable[[Req, FinishReason], None]


def expire_waiting(
    waiting: list[Req],
    timeout_s: float | None,
    finish: Finish,
    now: float | None = None,
    on_expired: Callable[[Req], None] | None = None,
    waiting_for: str = "admission",
) -> None:
    """Finish (and drop from ``waiting``) every never-admitted request older than ``timeout_s``.

    Requests that already produced tokens (retracted ones) keep their place: they were admitted.
    ``on_expired`` releases what a request holds in that queue (a grammar wait's compile future);
    ``waiting_for`` names what it waited for in the error.
    """
    if not timeout_s or not waiting:
        return
    now = time.monotonic() if now is None else now
    for req in [r for r in waiting if not r.admitted_once and now - r.arrived_at > timeout_s]:
        waiting.remove(req)
        if on_expired is not None:
            on_expired(req)
        finish(
            req,
            FinishAbort(
                f"the request waited more than {timeout_s:g} s for {waiting_for} "
                "(--queue-timeout); the server is overloaded, retry later",
                QUEUE_TIMEOUT_STATUS,
            ),
        )


def expire_grammar_waits(grammars: GrammarQueue, timeout_s: float | None, finish: Finish) -> None:
    """``--queue-timeout`` for requests still waiting for their grammar to compile: they end with the
    same 503 and let go of the compile (which goes on for others that share the grammar, and is
    bounded by ``grammar_compile_timeout`` in the compile pool)."""
    expire_waiting(
        grammars.pending, timeout_s, finish, on_expired=grammars.discard, waiting_for="its grammar to compile"
    )
