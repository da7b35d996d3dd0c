"""Decide whether a request is finished after it received a new token."""

from __future__ import annotations

from typing import Any

from radixlm.runtime.messages import CLIENT_ABORT_STATUS
from radixlm.runtime.sampling.stop_regex import StopRegexes
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

        Stops (token ids, stop strings) count only from ``min_new_tokens`` on; the grammar's end and
        the length limits always do.
        """
        p = req.sampling_params
        token = req.output_ids[-1]
        if req.to_abort is not None:
            return FinishAbort(req.to_abort, CLIENT_ABORT_STATUS)
        if req.grammar is not None and req.grammar.is_terminated():  # nothing can follow, whatever min
            return FinishStop(None)
        if len(req.output_ids) >= p.min_new_tokens:
            if token in p.stop_token_ids or (not p.ignore_eos and token in self.eos_token_ids):
                return FinishStop(token)
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
        """The text a stop regex matched in the output, or None; the detokenizer cuts the text there.

        Only a match ending in the tokens added since the last check is new (``StopRegexes``): the
        first check searches the whole output, later ones a window as wide as the longest match."""
        state = req.stop_regexes
        if state is None:
            state = req.stop_regexes = StopRegexes(req.sampling_params.stop_regex)
        ids = req.output_ids
        skip = req.sampling_params.skip_special_tokens
        seen = state.checked_len if 0 < state.checked_len <= len(ids) else 0
        state.checked_len = len(ids)
        if seen == 0 or state.width is None:
            return state.search(self.tokenizer.decode(ids, skip_special_tokens=skip))
        # NOTE: a token decodes to at least one character (but for partial UTF-8 bytes and skipped
        # special tokens), so width + 4 tokens usually reach far enough back; otherwise widen.
        back = state.width + 4
        while True:
            start = max(0, seen - back)
            head = self.tokenizer.decode(ids[start:seen], skip_special_tokens=skip)
            text = self.tokenizer.decode(ids[start:], skip_special_tokens=skip)
            # a trailing partial character of `head` is completed by the new tokens: it is new text
            pos = len(head.rstrip("\ufffd")) - state.width
            if pos >= 1 or start == 0:  # one character of context before `pos` keeps ^ and \b exact
                return state.search(text, max(0, pos))
            back *= 2

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
