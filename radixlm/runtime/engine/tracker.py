"""One running request of the Engine: detokenizes its outputs and hands responses to its sink."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from radixlm.runtime.detokenizer.incremental import IncrementalDetokenizer
from radixlm.runtime.messages import LOGPROB_FIELDS, ReqTokenOut, TokenizedGenerateReq
from radixlm.runtime.requests.request_ids import public_rid
from radixlm.runtime.requests.response_builder import ResponseBuilder, TokenText, public_finish_reason

# Receives each response (every output when streaming, else the final one); None: the loop died.
Sink = Callable[[dict | None], None]


class RequestTracker:
    """Lives on the loop thread from submission until the request's final output."""

    def __init__(
        self, req: TokenizedGenerateReq, tokenizer: Any, token_text: TokenText | None, sink: Sink
    ) -> None:
        params = req.sampling_params
        self.sink = sink
        self.stream = req.stream
        self.detok = IncrementalDetokenizer(
            tokenizer,
            params.skip_special_tokens,
            params.spaces_between_special_tokens,
            params.stop,
            params.no_stop_trim,
        )
        self.output_ids: list[int] = []
        # NOTE: the Engine always answers with the logprob fields (empty unless asked for).
        self.response = ResponseBuilder(
            public_rid(req.rid),
            prompt_tokens=len(req.input_ids),
            token_text=token_text,
            include_logprobs=True,
        )

    def on_output(self, out: ReqTokenOut) -> None:
        ids = out.new_token_ids.tolist()
        self.output_ids.extend(ids)
        if out.finished:
            self.detok.finish(out.finish_reason, ids)
        else:
            self.detok.feed(ids)
        progress = {
            "finish_reason": public_finish_reason(out.finish_reason),
            "prompt_tokens": out.prompt_tokens,
            "completion_tokens": out.completion_tokens,
            "cached_tokens": out.cached_tokens,
            **(out.spec_meta or {}),
        }
        logprobs = {name: getattr(out, name) for name in LOGPROB_FIELDS}
        self.response.update(self.detok.text, self.output_ids, progress, logprobs, out.finished)
        if self.stream or out.finished:
            self.sink(self._result(out))

    def _result(self, out: ReqTokenOut) -> dict:
        result = self.response.snapshot()
        if out.finished and (out.finish_reason or {}).get("type") == "abort":
            result["error"] = out.finish_reason  # with its status_code: 400 is the caller's fault
        return result
