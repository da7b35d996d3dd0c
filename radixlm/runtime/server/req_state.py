"""What the TokenizerManager knows about one HTTP request while it runs.

A ``ReqGroup`` is one HTTP request: a single prompt, a batch, and each prompt's ``n`` samples.
Each sample (one scheduler rid) is a ``SampleState`` whose ``ResponseBuilder`` holds the latest
cumulative text. Outputs are coalesced: a slow reader skips intermediate states and sees the
newest one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from radixlm.runtime.messages import CLIENT_ABORT_STATUS, ReqTextOut
from radixlm.runtime.requests.request_ids import public_rid
from radixlm.runtime.requests.response_builder import ResponseBuilder, TokenText
from radixlm.runtime.server.errors import ApiError


class SampleState:
    """One sample: its response under construction and whether the caller still has to see it."""

    def __init__(
        self,
        group: ReqGroup,
        index: int,
        rid: str,
        request_rid: str,
        prompt_tokens: int,
        token_text: TokenText | None,
    ) -> None:
        self.group = group
        self.index = index
        self.rid = rid  # the scheduler's rid of this sample
        self.request_rid = request_rid  # the rid of the prompt it samples (abort_request uses it)
        self.response = ResponseBuilder(
            public_rid(rid),
            prompt_tokens=prompt_tokens,
            token_text=token_text,
            include_logprobs=group.return_logprob,
            started_at=group.created_at,
        )
        self.error: ApiError | None = None
        self.dirty = False
        self._shown_tokens = 0  # output tokens when the caller was last told of a change

    @property
    def text(self) -> str:
        return self.response.text

    @property
    def meta(self) -> dict[str, Any]:
        return self.response.meta

    @property
    def logprobs(self) -> dict[str, list]:
        """Accumulated logprob entries by ``LOGPROB_FIELDS`` name."""
        return self.response.logprobs

    @property
    def finished(self) -> bool:
        return self.response.finished

    def apply(self, out: ReqTextOut) -> None:
        """Take a new output from the detokenizer."""
        self.response.update(out.text, out.output_ids, out.meta_info, out.meta_info, out.finished)
        if out.finished:
            reason = out.meta_info.get("finish_reason") or {}
            status = reason.get("status_code") if reason.get("type") == "abort" else None
            if status is not None and status != CLIENT_ABORT_STATUS:  # rejected, not aborted by a client
                self.error = ApiError(reason.get("message", "request rejected"), int(status))
        tokens, interval = len(out.output_ids), self.group.stream_interval
        # --stream-interval: the first token at once, then every `interval` tokens, and the end
        if interval == 1 or out.finished or not self._shown_tokens or tokens - self._shown_tokens >= interval:
            self._shown_tokens = max(tokens, 1)
            self._mark_dirty()

    def fail(self, error: ApiError) -> None:
        """End the sample with an error (server failure)."""
        if not self.finished:
            self.error = error
            self.response.finish({"type": "abort", "message": error.message})
            self._mark_dirty()

    def snapshot(self) -> dict[str, Any]:
        """The native (SGLang) response object: ``{"text", "output_ids", "meta_info"}``."""
        return self.response.snapshot()

    def _mark_dirty(self) -> None:
        self.dirty = True
        self.group.changed.set()


class ReqGroup:
    """The samples of one HTTP request, in response order (prompt ``i``, sample ``j`` at ``i*n+j``)."""

    def __init__(self, rid: str, return_logprob: bool, stream_interval: int = 1) -> None:
        self.rid = rid
        self.return_logprob = return_logprob
        self.stream_interval = stream_interval  # output tokens between the changes a caller sees
        self.samples: list[SampleState] = []
        self.changed = asyncio.Event()
        self.created_at = time.perf_counter()

    @property
    def finished(self) -> bool:
        return all(s.finished for s in self.samples)

    def first_error(self) -> ApiError | None:
        return next((s.error for s in self.samples if s.error is not None), None)

    async def updates(self) -> AsyncIterator[SampleState]:
        """Each sample whenever it changed, until all have finished."""
        while True:
            for sample in self.samples:
                if sample.dirty:
                    sample.dirty = False
                    yield sample
            if self.finished:
                return
            await self.changed.wait()
            self.changed.clear()

    async def wait(self) -> list[SampleState]:
        """Wait for every sample to finish."""
        while not self.finished:
            await self.changed.wait()
            self.changed.clear()
        return self.samples
