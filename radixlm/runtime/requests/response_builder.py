"""One sample's SGLang-shaped response ``{"text", "output_ids", "meta_info"}``, for every front end.

The Engine and the HTTP server both feed a ``ResponseBuilder`` with each new output of a sample
and answer with its ``snapshot()``. Logprob entries are ``[logprob, token_id, text-or-None]``;
top logprobs are one such list per position (or None where there is none).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from radixlm.runtime.messages import LOGPROB_FIELDS, SPEC_META_FIELDS

TokenText = Callable[[int], str]


class ResponseBuilder:
    """Accumulates one sample's text, output ids, token counts and logprobs.

    ``token_text`` (when given) adds each logprob entry's token text. ``include_logprobs`` puts the
    four logprob fields into ``meta_info`` (empty lists when none came).
    """

    def __init__(
        self,
        rid: str,
        *,
        prompt_tokens: int = 0,
        token_text: TokenText | None = None,
        include_logprobs: bool = False,
        started_at: float | None = None,
    ) -> None:
        self.token_text = token_text
        self.include_logprobs = include_logprobs
        self.started_at = time.perf_counter() if started_at is None else started_at
        self.finished_at: float | None = None
        self.text = ""
        self.output_ids: Sequence[int] = ()
        self.meta: dict[str, Any] = {
            "id": rid,
            "finish_reason": None,
            "prompt_tokens": prompt_tokens,
            "completion_tokens": 0,
            "cached_tokens": 0,
        }
        self.logprobs: dict[str, list] = {}

    @property
    def finished(self) -> bool:
        return self.finished_at is not None

    def update(
        self,
        text: str,
        output_ids: Sequence[int],
        progress: Mapping[str, Any],
        logprobs: Mapping[str, list | None],
        finished: bool,
    ) -> None:
        """Take a new output: the cumulative text and ids; ``progress``, the latest ``finish_reason``,
        ``prompt_tokens``, ``completion_tokens`` and ``cached_tokens``; and the new logprob entries
        as ``(logprob, token_id)`` pairs under their ``LOGPROB_FIELDS`` names."""
        self.text = text
        self.output_ids = output_ids
        for key in ("finish_reason", "prompt_tokens", "completion_tokens", "cached_tokens"):
            self.meta[key] = progress[key]
        for key in SPEC_META_FIELDS:  # a speculating request's, on its last output
            if key in progress:
                self.meta[key] = progress[key]
        for name in LOGPROB_FIELDS:
            entries = logprobs.get(name)
            if entries:
                fmt = self._top_entries if "top" in name else self._entries
                self.logprobs.setdefault(name, []).extend(fmt(entries))
        if finished:
            self.finish(self.meta["finish_reason"])

    def finish(self, finish_reason: dict[str, Any] | None) -> None:
        """Mark the sample finished (also when it fails without a final output)."""
        self.meta["finish_reason"] = finish_reason
        if self.finished_at is None:
            self.finished_at = time.perf_counter()

    def e2e_latency(self) -> float:
        return (self.finished_at or time.perf_counter()) - self.started_at

    def snapshot(self) -> dict[str, Any]:
        """The response object as clients see it."""
        meta = dict(self.meta, e2e_latency=round(self.e2e_latency(), 6))
        if self.include_logprobs:
            for name in LOGPROB_FIELDS:
                meta[name] = list(self.logprobs.get(name, []))
        ids = self.output_ids
        return {
            "text": self.text,
            "output_ids": ids.tolist() if isinstance(ids, np.ndarray) else list(ids),
            "meta_info": meta,
        }

    def _entries(self, pairs: list) -> list[list]:
        text = self.token_text
        return [[lp, int(tid), text(int(tid)) if text else None] for lp, tid in pairs]

    def _top_entries(self, rows: list) -> list[list[list] | None]:
        return [None if row is None else self._entries(row) for row in rows]


def public_finish_reason(reason: dict[str, Any] | None) -> dict[str, Any] | None:
    """The finish reason without the scheduler's internal ``status_code``."""
    if reason is None:
        return None
    return {k: v for k, v in reason.items() if k != "status_code"}
