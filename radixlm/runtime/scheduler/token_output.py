"""Turn a request's progress into the ``ReqTokenOut`` the detokenizer (or the Engine) receives."""

from __future__ import annotations

import numpy as np

from radixlm.runtime.messages import ReqTokenOut, TokenizedGenerateReq
from radixlm.runtime.scheduler.finish_reason import FinishAbort, finish_reason_dict
from radixlm.runtime.scheduler.req import Req


def take_token_output(req: Req) -> ReqTokenOut:
    """What ``req`` has not sent yet; advances its sent cursors (tokens and logprobs).

    Unverified jump-forward tokens are held back until verified (or the request finished).
    """
    end = req.jump_draft.start if req.jump_draft is not None and not req.finished else len(req.output_ids)
    p = req.sampling_params
    out = ReqTokenOut(
        rid=req.rid,
        new_token_ids=np.asarray(req.output_ids[req.sent_output_len : end], dtype=np.int32),
        finished=req.finished,
        finish_reason=finish_reason_dict(req.finish_reason),
        prompt_tokens=len(req.origin_input_ids),
        completion_tokens=len(req.output_ids),
        cached_tokens=req.cached_tokens,
        skip_special_tokens=p.skip_special_tokens,
        spaces_between_special_tokens=p.spaces_between_special_tokens,
        stop_strings=list(p.stop),
        no_stop_trim=p.no_stop_trim,
        first_token_at=req.first_token_at,
    )
    if req.finished and req.spec is not None:
        out.spec_meta = req.spec.meta_info(len(req.output_ids))
    if req.return_logprob:
        state = req.logprobs
        if not state.sent_input and state.input_done:
            state.sent_input = True
            out.input_token_logprobs = state.input_tokens
            out.input_top_logprobs = state.input_top if req.top_logprobs_num else None
        lo = state.sent_output_len
        out.output_token_logprobs = state.output_tokens[lo:]
        out.output_top_logprobs = state.output_top[lo:] if req.top_logprobs_num else None
        state.sent_output_len = len(state.output_tokens)
    req.sent_output_len = end
    return out


def rejected_output(msg: TokenizedGenerateReq, reason: FinishAbort) -> ReqTokenOut:
    """The one output of a request that ended with ``reason`` before it became a ``Req``."""
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
