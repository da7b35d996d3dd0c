"""Token outputs of the scheduler -> cumulative text outputs for the TokenizerManager."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from radixlm.runtime.detokenizer.incremental import IncrementalDetokenizer
from radixlm.runtime.messages import LOGPROB_FIELDS, BatchTextOut, BatchTokenOut, ReqTextOut, ReqTokenOut


@dataclass
class _ReqState:
    detok: IncrementalDetokenizer
    id_chunks: list[np.ndarray] = field(default_factory=list)

    def output_ids(self) -> np.ndarray:
        if len(self.id_chunks) > 1:
            self.id_chunks = [np.concatenate(self.id_chunks)]
        return self.id_chunks[0] if self.id_chunks else np.zeros(0, dtype=np.int32)


class DetokenizerManager:
    """Keeps one ``IncrementalDetokenizer`` per running request; forgets it when it finishes."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.states: dict[str, _ReqState] = {}

    def handle(self, batch: BatchTokenOut) -> BatchTextOut:
        return BatchTextOut([self._handle_isolated(out) for out in batch.outs])

    def _handle_isolated(self, out: ReqTokenOut) -> ReqTextOut:
        """One request's detokenizing error ends that request with a 500, not the process. Its later
        outputs (the scheduler does not know) are ignored by the server like any finished rid's."""
        try:
            return self._handle_one(out)
        except Exception as e:  # noqa: BLE001 - the error is the request's answer
            self.states.pop(out.rid, None)
            reason = {
                "type": "abort",
                "message": f"detokenizing failed: {type(e).__name__}: {e}"[:500],
                "status_code": 500,
            }
            meta = {
                "id": out.rid,
                "finish_reason": reason,
                "prompt_tokens": out.prompt_tokens,
                "completion_tokens": out.completion_tokens,
                "cached_tokens": out.cached_tokens,
            }
            return ReqTextOut(out.rid, "", np.zeros(0, dtype=np.int32), True, meta)

    def _handle_one(self, out: ReqTokenOut) -> ReqTextOut:
        state = self.states.get(out.rid)
        if state is None:
            detok = IncrementalDetokenizer(
                self.tokenizer,
                skip_special_tokens=out.skip_special_tokens,
                spaces_between_special_tokens=out.spaces_between_special_tokens,
                stop_strings=out.stop_strings,
                no_stop_trim=out.no_stop_trim,
            )
            state = self.states[out.rid] = _ReqState(detok)
        new_ids = np.asarray(out.new_token_ids, dtype=np.int32)
        if len(new_ids):
            state.id_chunks.append(new_ids)
        if out.finished:
            state.detok.finish(out.finish_reason, new_ids.tolist())
            del self.states[out.rid]
        else:
            state.detok.feed(new_ids.tolist())
        meta_info: dict[str, Any] = {
            "id": out.rid,
            "finish_reason": out.finish_reason if out.finished else None,
            "prompt_tokens": out.prompt_tokens,
            "completion_tokens": out.completion_tokens,
            "cached_tokens": out.cached_tokens,
            **(out.spec_meta or {}),
        }
        for name in LOGPROB_FIELDS:
            value = getattr(out, name)
            if value is not None:
                meta_info[name] = value
        return ReqTextOut(
            out.rid, state.detok.text, state.output_ids(), out.finished, meta_info, out.first_token_at
        )
