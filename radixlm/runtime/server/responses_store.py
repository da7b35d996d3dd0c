"""Stored responses (``store: true``): what ``previous_response_id`` continues, ``GET`` and ``DELETE`` read.

A bounded, in-memory store: at most ``--max-stored-responses`` responses, the oldest evicted first.
Each keeps its response object, its conversation as items (the input it continued, its own input
and its output), the prompt text it ran on and its token ids, prompt and output.

The KV of a stored response stays pinned in the radix tree as a session turn's does
(``sessions.py``): it runs with ``pin_children=1``, so its finished context (prompt + output) stays
locked until the follow-up that names it (in ``unpin_rids``) is admitted, the response is deleted
or evicted, or ``--session-timeout`` seconds pass (the scheduler also drops pins under KV pressure).
A follow-up continues from the previous response's own token ids (``continuation``), so the whole
previous turn is a cache hit.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from radixlm.runtime.messages import ReleasePinsReq


@dataclass
class StoredResponse:
    body: dict[str, Any]  # the response object as served
    items: list[dict[str, Any]]  # the conversation: input items (earlier turns first), then the output
    prompt: str  # the prompt text it ran on
    input_ids: list[int]
    output_ids: list[int]
    rid: str  # the request id it ran under (its pin's name in the scheduler)
    pinned: bool


class ResponseStore:
    """The stored responses of one server (the TokenizerManager's event loop is its only user)."""

    def __init__(self, tm: Any, capacity: int) -> None:
        self.tm = tm
        self.capacity = capacity
        self._responses: OrderedDict[str, StoredResponse] = OrderedDict()

    def get(self, response_id: str) -> StoredResponse | None:
        return self._responses.get(response_id)

    async def put(self, response: StoredResponse) -> None:
        """Store ``response``; the oldest ones beyond the capacity are evicted (pins released)."""
        self._responses[response.body["id"]] = response
        while len(self._responses) > self.capacity:
            _, oldest = self._responses.popitem(last=False)
            await self.unpin(oldest)

    async def delete(self, response_id: str) -> bool:
        response = self._responses.pop(response_id, None)
        if response is not None:
            await self.unpin(response)
        return response is not None

    async def unpin(self, response: StoredResponse) -> None:
        if response.pinned:
            response.pinned = False
            await self.tm.send(ReleasePinsReq([response.rid]))

    def continuation(self, previous: StoredResponse, prompt: str) -> tuple[list[int], str]:
        """``(token ids, text after them)`` for a ``prompt`` that continues ``previous``.

        When ``prompt`` extends the previous prompt, the previous turn is kept as the model wrote it
        (its own output ids, as a session turn is): up to the end of the assistant turn when the
        template renders that turn as the model wrote it, else up to the end-of-turn token the template
        writes after it (the template may rewrite the turn: tool-call JSON re-serialised, thinking
        dropped; the model's own tokens stand for it). Otherwise only the previous prompt ids are kept; a
        prompt that does not extend it (other instructions or tools) is tokenized whole."""
        if not prompt.startswith(previous.prompt):
            return [], prompt
        rest = prompt[len(previous.prompt) :]
        context = previous.input_ids + previous.output_ids
        decode = self.tm.tokenizer.decode
        generated = decode(previous.output_ids, skip_special_tokens=False)
        if generated and rest.startswith(generated):
            return context, rest[len(generated) :]
        end = self._turn_end(previous.output_ids)
        cut = rest.find(end) if end else -1
        if cut >= 0:  # the model's turn, then the template's text from the end of that turn on
            return context, rest[cut + len(end) :] if generated.endswith(end) else rest[cut:]
        return list(previous.input_ids), rest

    def _turn_end(self, output_ids: list[int]) -> str:
        """The text that ends an assistant turn: the special token the output ended with, else EOS."""
        tokenizer = self.tm.tokenizer
        last = output_ids[-1:]
        if last and last[0] in set(getattr(tokenizer, "all_special_ids", ())):
            return tokenizer.decode(last, skip_special_tokens=False)
        return getattr(tokenizer, "eos_token", None) or ""
