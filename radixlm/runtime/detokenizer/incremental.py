"""Incremental detokenization of one request: token ids in, stable text deltas out.

Two offsets into the output ids drive the decoding (the scheme vLLM and SGLang use):
``prefix_offset`` starts a short window of already decoded tokens that gives the tokenizer its
context (leading-space rules of SentencePiece, merges of byte-level BPE), ``read_offset`` ends it.
Decoding ``ids[prefix_offset:]`` and subtracting the window's own text gives the new text. When it
ends in U+FFFD the last tokens hold only part of a multi-byte character: nothing advances until the
character is complete, so no replacement-character halves reach the client.

Stop strings: the scheduler detects them; this class cuts the text before the matched one
(unless ``no_stop_trim``) and, while streaming, holds back any tail that could still grow into a
stop string, so text that is later cut is never emitted. The emitted text only ever grows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

_REPLACEMENT_CHAR = "\ufffd"


class IncrementalDetokenizer:
    """Turns the output token ids of one request into cumulative text that never moves backwards.

    ``feed(new_ids)`` returns the new text that is safe to show; ``finish(reason)`` returns the
    rest, with a matched stop string cut; ``text`` is everything returned so far.
    """

    def __init__(
        self,
        tokenizer: Any,
        skip_special_tokens: bool = True,
        spaces_between_special_tokens: bool = True,
        stop_strings: Sequence[str] = (),
        no_stop_trim: bool = False,
    ) -> None:
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.spaces_between_special_tokens = spaces_between_special_tokens
        self.stop_strings = tuple(s for s in stop_strings if s)
        self.no_stop_trim = no_stop_trim
        self.ids: list[int] = []
        self.prefix_offset = 0
        self.read_offset = 0
        self._decoded = ""  # text of ids[:read_offset]: complete characters only
        self._emitted = 0  # length of the prefix of _decoded handed out
        self._final: str | None = None  # set by finish()

    @property
    def text(self) -> str:
        """The cumulative text returned by ``feed`` and ``finish`` so far."""
        if self._final is not None:
            return self._final
        return self._decoded[: self._emitted]

    @property
    def finished(self) -> bool:
        return self._final is not None

    def feed(self, new_ids: Sequence[int]) -> str:
        """Append output ids; return the newly stable text (possibly empty)."""
        if self._final is not None:
            raise RuntimeError("feed() after finish()")
        self.ids.extend(int(i) for i in new_ids)
        self._advance(flush=False)
        end = self._stable_end()
        delta = self._decoded[self._emitted : end]
        self._emitted = end
        return delta

    def finish(self, finish_reason: dict[str, Any] | None = None, new_ids: Sequence[int] = ()) -> str:
        """Flush everything held back and return the final delta; cuts a matched stop string.

        Bytes of a character left incomplete at the end (the request stopped inside it) are dropped.

        ``new_ids`` are the request's last ids, when not already fed. Passing them here (rather
        than to ``feed``) lets a matched stop token id be left out of the text, as SGLang does.
        """
        if self._final is not None:
            return ""
        new_ids = [int(i) for i in new_ids]
        reason = finish_reason or {}
        matched = reason.get("matched") if reason.get("type") == "stop" else None
        if not self.no_stop_trim and isinstance(matched, int) and new_ids and new_ids[-1] == matched:
            new_ids = new_ids[:-1]
        self.ids.extend(new_ids)
        self._advance(flush=True)
        final = self._decoded
        if not self.no_stop_trim and isinstance(matched, str) and matched:
            # NOTE: feed() never emits a stop string, so the match lies in the part not yet emitted.
            pos = final.find(matched, self._emitted)
            if pos == -1 and matched in final:  # a stop regex's match may begin in emitted text
                pos = max(final.rfind(matched), self._emitted)
            if pos != -1:
                final = final[:pos]
        delta = final[self._emitted :]
        self._final = final
        self._emitted = len(final)
        return delta

    # ---- internals ------------------------------------------------------------------------
    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(
            ids,
            skip_special_tokens=self.skip_special_tokens,
            spaces_between_special_tokens=self.spaces_between_special_tokens,
        )

    def _advance(self, flush: bool) -> None:
        """Decode ids past ``read_offset`` into ``_decoded``; without ``flush`` only whole characters."""
        if self.read_offset >= len(self.ids):
            return
        prefix_text = self._decode(self.ids[self.prefix_offset : self.read_offset])
        new_text = self._decode(self.ids[self.prefix_offset :])
        if len(new_text) <= len(prefix_text) and not flush:
            return  # e.g. a skipped special token: keep it in the window
        if new_text.endswith(_REPLACEMENT_CHAR) and not flush:
            return  # an incomplete multi-byte character: wait for its remaining bytes
        delta = new_text[len(prefix_text) :]
        if flush:  # the request ended inside a multi-byte character: drop the incomplete bytes
            delta = delta.rstrip(_REPLACEMENT_CHAR)
        # NOTE: text already decoded is never revised, even if more context would change it.
        self._decoded += delta
        self.prefix_offset = self.read_offset
        self.read_offset = len(self.ids)

    def _stable_end(self) -> int:
        """End of the text that can be shown: before any stop string or a tail that may become one."""
        text = self._decoded
        end = len(text)
        if self.no_stop_trim or not self.stop_strings:
            return end
        for stop in self.stop_strings:
            pos = text.find(stop, self._emitted)
            if pos != -1:
                end = min(end, pos)
            for k in range(min(len(stop) - 1, len(text) - self._emitted), 0, -1):
                if text.endswith(stop[:k]):
                    end = min(end, len(text) - k)
                    break
        return max(end, self._emitted)
