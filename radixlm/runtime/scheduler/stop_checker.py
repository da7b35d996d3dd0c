"""Decide whether a request is finished after it received a new token."""

from __future__ import annotations

import functools
import re
from typing import Any

from radixlm.runtime.messages import CLIENT_ABORT_STATUS
from radixlm.runtime.scheduler.finish_reason import FinishAbort, FinishLength, FinishReason, FinishStop
from radixlm.runtime.scheduler.req import Req


class StopChecker:
    """EOS and stop token ids, stop strings (matched on decoded text across token boundaries),
    grammar termination, max_new_tokens and the context length."""

    def __init__(self, tokenizer: Any, eos_token_ids: list[int], context_length: int) -> None:
        self.tokenizer = tokenizer
        self.eos_token_ids = set(eos_token_ids)
        self.context_length = context_length

    def check(self, req: Req) -> FinishReason | None:
        """The reason ``req`` finished with its newest token, or None when it goes on.

        Stops (token ids, grammar end, stop strings) count only from ``min_new_tokens`` on; the
        length limits always do.
        """
        p = req.sampling_params
        token = req.output_ids[-1]
        if req.to_abort is not None:
            return FinishAbort(req.to_abort, CLIENT_ABORT_STATUS)
        if len(req.output_ids) >= p.min_new_tokens:
            if token in p.stop_token_ids or (not p.ignore_eos and token in self.eos_token_ids):
                return FinishStop(token)
            if req.grammar is not None and req.grammar.is_terminated():
                return FinishStop(None)
            if p.stop:
                matched = self._match_stop_string(req)
                if matched is not None:
                    return FinishStop(matched)
            if p.stop_regex:
                matched = self._match_stop_regex(req)
                if matched is not None:
                    return FinishStop(matched)
        if len(req.output_ids) >= p.max_new_tokens:
            return FinishLength(p.max_new_tokens)
        if req.seq_len >= self.context_length:
            return FinishLength(len(req.output_ids))
        return None

    def _match_stop_regex(self, req: Req) -> str | None:
        """The text a stop regex matched in the output, or None. The whole output is searched (a
        match may span any number of tokens); the detokenizer cuts the text at that match."""
        skip = req.sampling_params.skip_special_tokens
        text = self.tokenizer.decode(req.output_ids, skip_special_tokens=skip)
        for pattern in req.sampling_params.stop_regex:
            m = _compiled(pattern).search(text)
            if m is not None and m.group(0):
                return m.group(0)
        return None

    def _match_stop_string(self, req: Req) -> str | None:
        stops = req.sampling_params.stop
        longest = max(len(s) for s in stops)
        # NOTE: every token decodes to at least one character except partial UTF-8 bytes, so
        # `longest + 4` tokens cover any stop string that the newest token may have completed.
        tail_ids = req.output_ids[-(longest + 4) :]
        tail = self.tokenizer.decode(tail_ids, skip_special_tokens=req.sampling_params.skip_special_tokens)
        # A stop string inside the older part of this window was already seen by the previous step
        # (whose window reached one token further back), which would have finished the request.
        for s in stops:
            if s in tail:
                return s
        return None


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> re.Pattern:
    return re.compile(pattern)
