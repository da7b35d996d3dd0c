"""Per-request state of an llguidance grammar (a ``Matcher``, as ``OutlinesMatcher`` is)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from radixlm.runtime.constrained.rollback import EosAwareRollback
from radixlm.runtime.constrained.vocabulary import TokenVocabulary

if TYPE_CHECKING:  # grammar.py imports this module to make matchers
    from radixlm.runtime.constrained.llguidance.grammar import LLGuidanceGrammar

MAX_ROLLBACK = 16


class LLGuidanceMatcher(EosAwareRollback):
    """Follows one request's output tokens; masks, forced bytes and rollback come from llguidance.

    NOTE: like ``OutlinesMatcher`` it must see exactly the request's output tokens. A token the grammar
    does not allow is refused without touching the state (``try_consume_tokens``); a mask step that
    runs out of llguidance's fuel leaves the matcher in error, which then allows nothing but EOS and
    refuses it, so the scheduler ends the request with an error.
    """

    def __init__(self, grammar: LLGuidanceGrammar) -> None:
        self.grammar = grammar
        self._matcher = grammar.template.deep_copy()
        self._tokens: list[int] = []
        self._ended = False

    @property
    def vocab(self) -> TokenVocabulary:
        """The byte vocabulary the grammar was compiled for."""
        return self.grammar.vocab

    @property
    def token_ids(self) -> list[int]:
        """Tokens accepted so far (EOS excluded)."""
        return list(self._tokens)

    @property
    def error(self) -> str:
        """llguidance's error message ('' when the matcher is healthy)."""
        return self._matcher.get_error() if self._matcher.is_error() else ""

    def accept_token(self, token_id: int) -> bool:
        """Advance by one sampled token; False (state unchanged) if the grammar does not allow it."""
        if self._ended or self._matcher.is_error():
            return False
        if token_id in self.grammar.eos_token_ids:
            if not self._matcher.is_accepting():
                return False
            self._ended = True
            return True
        if self._matcher.try_consume_tokens([token_id]) != 1:
            return False
        self._tokens.append(token_id)
        return True

    def broken_reason(self) -> str | None:
        """Why the grammar itself failed (it allowed a token and then refused it), else None."""
        if not self._matcher.is_error():
            return None
        return self._matcher.get_error() or "the grammar failed"

    def fill_bitmask(self, bitmask: torch.Tensor, row: int) -> None:
        """Write the allowed-token bits into row ``row`` of a CPU int32 ``[bs, ceil(vocab / 32)]`` mask."""
        target = bitmask[row]
        if self._ended or self._matcher.is_error():
            target.zero_()
            if self._ended:
                self._set_eos_bits(target)
            return
        self._matcher.unsafe_compute_mask_ptr(target.data_ptr(), target.numel() * 4)
        if self._matcher.is_error():
            target.zero_()
        elif self._matcher.is_accepting():
            self._set_eos_bits(target)

    def _set_eos_bits(self, target: torch.Tensor) -> None:
        view = target.numpy().view("uint32")
        for eos in self.grammar.eos_token_ids:
            if eos < 32 * len(view):
                view[eos >> 5] |= 1 << (eos & 31)

    def is_terminated(self) -> bool:
        """True when the output is complete: EOS was accepted, or nothing but EOS may follow."""
        return self._ended or (self._matcher.is_stopped() and not self._matcher.is_error())

    @property
    def max_rollback(self) -> int:
        """How many accepted tokens ``rollback`` can undo right now."""
        return min(len(self._tokens), MAX_ROLLBACK) + int(self._ended)

    def _rollback_tokens(self, n: int) -> None:
        if not self._matcher.rollback(n):
            raise ValueError(f"llguidance could not roll back {n} tokens: {self._matcher.get_error()}")
        del self._tokens[-n:]

    def copy(self) -> LLGuidanceMatcher:
        """An independent matcher in the same state."""
        twin = LLGuidanceMatcher.__new__(LLGuidanceMatcher)
        twin.grammar = self.grammar
        twin._matcher = self._matcher.deep_copy()
        twin._tokens = list(self._tokens)
        twin._ended = self._ended
        return twin

    def forced_continuation(self) -> str:
        """The longest text the grammar forces next, up to its last complete UTF-8 character."""
        if self._ended or self._matcher.is_error():
            return ""
        forced = self._matcher.compute_ff_bytes()
        try:
            return forced.decode("utf-8")
        except UnicodeDecodeError as e:
            return forced[: e.start].decode("utf-8")
