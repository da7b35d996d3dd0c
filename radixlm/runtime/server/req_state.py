"""What the TokenizerManager knows about one HTTP request while it runs.

A ``ReqGroup`` is one HTTP request: a single prompt, a batch, and each prompt's ``n`` samples.
Each sample (one scheduler rid) is a ``SampleState`` holding the latest cumulative text. Outputs
are coalesced: a slow reader skips intermediate states and sees the newest one.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncIterator, Callable, Optional

import numpy as np

from radixlm.runtime.detokenizer.manager import LOGPROB_FIELDS
from radixlm.runtime.messages import ReqTextOut
from radixlm.runtime.server.errors import ApiError

TokenText = Callable[[int], str]
CLIENT_ABORT_STATUS = 499  # the scheduler's status for an abort the client asked for: a normal finish


class SampleState:
    """One sample: cumulative text, output ids, meta info and accumulated logprobs."""

    def __init__(self, group: "ReqGroup", index: int, rid: str, request_rid: str, prompt_tokens: int,
                 token_text: Optional[TokenText]) -> None:
        self.group = group
        self.index = index
        self.rid = rid  # the scheduler's rid of this sample
        self.request_rid = request_rid  # the rid of the prompt it samples (abort_request uses it)
        self.token_text = token_text  # set when logprob entries carry the token's text
        self.text = ""
        self.output_ids = np.zeros(0, dtype=np.int32)
        self.meta: dict[str, Any] = {"id": rid, "finish_reason": None, "prompt_tokens": prompt_tokens,
                                     "completion_tokens": 0, "cached_tokens": 0}
        self.logprobs: dict[str, list] = {}
        self.finished = False
        self.error: Optional[ApiError] = None
        self.dirty = False
        self.finished_at: Optional[float] = None

    def apply(self, out: ReqTextOut) -> None:
        """Take a new output from the detokenizer."""
        self.text = out.text
        self.output_ids = out.output_ids
        for key in ("finish_reason", "prompt_tokens", "completion_tokens", "cached_tokens"):
            self.meta[key] = out.meta_info[key]
        for name in LOGPROB_FIELDS:
            if name in out.meta_info:
                entries = out.meta_info[name]
                fmt = self._top_entries if "top" in name else self._entries
                self.logprobs.setdefault(name, []).extend(fmt(entries))
        if out.finished:
            reason = out.meta_info.get("finish_reason") or {}
            status = reason.get("status_code") if reason.get("type") == "abort" else None
            if status is not None and status != CLIENT_ABORT_STATUS:  # rejected, not aborted by a client
                self.error = ApiError(reason.get("message", "request rejected"), int(status))
            self._finish()
        self._mark_dirty()

    def fail(self, error: ApiError) -> None:
        """End the sample with an error (server failure)."""
        if not self.finished:
            self.error = error
            self.meta["finish_reason"] = {"type": "abort", "message": error.message}
            self._finish()
            self._mark_dirty()

    def e2e_latency(self) -> float:
        return (self.finished_at or time.perf_counter()) - self.group.created_at

    def snapshot(self) -> dict[str, Any]:
        """The native (SGLang) response object: ``{"text", "output_ids", "meta_info"}``."""
        meta = dict(self.meta, e2e_latency=round(self.e2e_latency(), 6))
        if self.group.return_logprob:
            for name in LOGPROB_FIELDS:
                meta[name] = self.logprobs.get(name, [])
        return {"text": self.text, "output_ids": self.output_ids.tolist(), "meta_info": meta}

    def _finish(self) -> None:
        self.finished = True
        self.finished_at = time.perf_counter()

    def _mark_dirty(self) -> None:
        self.dirty = True
        self.group.changed.set()

    def _entries(self, pairs: list) -> list[list]:
        return [[lp, int(tid), self.token_text(int(tid)) if self.token_text else None] for lp, tid in pairs]

    def _top_entries(self, rows: list) -> list[Optional[list[list]]]:
        return [None if row is None else self._entries(row) for row in rows]


class ReqGroup:
    """The samples of one HTTP request, in response order (prompt ``i``, sample ``j`` at ``i*n+j``)."""

    def __init__(self, rid: str, return_logprob: bool) -> None:
        self.rid = rid
        self.return_logprob = return_logprob
        self.samples: list[SampleState] = []
        self.changed = asyncio.Event()
        self.created_at = time.perf_counter()

    @property
    def finished(self) -> bool:
        return all(s.finished for s in self.samples)

    def first_error(self) -> Optional[ApiError]:
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
