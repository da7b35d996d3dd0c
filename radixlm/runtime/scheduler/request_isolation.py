"""One request's failure stays that request's: an exception while the scheduler takes in a request
(admission, grammar validation) fails that request with a 500 naming the error; the loop goes on.

Only exceptions outside any one request (the forward pass, the step's bookkeeping) stop the process.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from radixlm.runtime.messages import ReqTokenOut, TokenizedGenerateReq
from radixlm.runtime.scheduler.finish_reason import FinishAbort, finish_reason_dict

logger = logging.getLogger(__name__)


def handle_isolated(scheduler: Any, msg: Any) -> Any:
    """``scheduler.handle(msg)``; a generation request whose handling raises is failed alone."""
    if not isinstance(msg, TokenizedGenerateReq):
        return scheduler.handle(msg)
    try:
        return scheduler.handle(msg)
    except Exception as exc:  # noqa: BLE001 - any error of one request fails only that request
        logger.exception("request %s failed while being taken in", msg.rid)
        drop_request(scheduler, msg)
        scheduler.pending_outputs.append(failed_output(msg, f"{type(exc).__name__}: {exc}"))
        return None


def drop_request(scheduler: Any, msg: TokenizedGenerateReq) -> None:
    """Remove a request that never ran from the queues and the request index (it holds no KV before
    admission), and release its parents' pins: it will never be admitted."""
    req = next((r for r in scheduler.requests.named(msg.rid) if r.rid == msg.rid), None)
    if req is None:  # it failed before it became a request
        scheduler.pins.release_children(list(msg.unpin_rids))
        return
    for queue in (scheduler.waiting, scheduler.grammars.pending):
        if any(r is req for r in queue):
            queue.remove(req)
    scheduler.grammars.discard(req)
    scheduler.requests.forget(req)
    scheduler.pins.on_admitted(req)


def failed_output(msg: TokenizedGenerateReq, error: str) -> ReqTokenOut:
    reason = FinishAbort(f"internal error while taking in the request: {error[:500]}", 500)
    p = msg.sampling_params
    return ReqTokenOut(
        rid=msg.rid,
        new_token_ids=np.zeros(0, dtype=np.int32),
        finished=True,
        finish_reason=finish_reason_dict(reason),
        prompt_tokens=len(msg.input_ids),
        completion_tokens=0,
        cached_tokens=0,
        skip_special_tokens=p.skip_special_tokens,
        spaces_between_special_tokens=p.spaces_between_special_tokens,
        stop_strings=list(p.stop),
        no_stop_trim=p.no_stop_trim,
    )
