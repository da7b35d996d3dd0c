"""Per-request state of an outlines-core grammar: which tokens may come next, and what it forces."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from outlines_core import Guide

from radixlm.runtime.constrained.rollback import EosAwareRollback
from radixlm.runtime.constrained.vocabulary import TokenVocabulary

if TYPE_CHECKING:  # grammar.py imports this module to make matchers
    from radixlm.runtime.constrained.outlines.grammar import OutlinesGrammar

MAX_ROLLBACK = 16


def _split_utf8(data: bytes) -> tuple[str, bytes] | None:
    """``data`` as (complete characters, trailing partial character); None if it is not UTF-8."""
    try:
        return data.decode("utf-8"), b""
    except UnicodeDecodeError as e:
        if e.reason != "unexpected end of data":
            return None
        return data[: e.start].decode("utf-8"), data[e.start :]


class OutlinesMatcher(EosAwareRollback):
    """Tracks one request's output through an ``OutlinesGrammar``.

    NOTE: the matcher must see exactly the request's output tokens, in order (``accept_token`` after
    each sample, ``rollback`` when output tokens are replaced). Masks are written into CPU tensors.
    """

    def __init__(self, grammar: OutlinesGrammar) -> None:
        self.grammar = grammar
        self._guide = Guide(grammar.index, max_rollback=MAX_ROLLBACK)
        self._tokens: list[int] = []
        self._ended = False
        # Character-DFA state (and undecoded partial character) after each prefix of _tokens, lazily.
        fsm = grammar.fsm
        self._text_states: list[tuple[int | None, bytes]] = [(fsm.initial if fsm else None, b"")]

    @property
    def vocab(self) -> TokenVocabulary:
        """The byte vocabulary the grammar was compiled for."""
        return self.grammar.vocab

    @property
    def token_ids(self) -> list[int]:
        """Tokens accepted so far (EOS excluded)."""
        return list(self._tokens)

    def accept_token(self, token_id: int) -> bool:
        """Advance by one sampled token; False (state unchanged) if the grammar does not allow it."""
        if self._ended:
            return False
        if token_id in self.grammar.eos_token_ids:
            if not self._guide.is_finished():
                return False
            self._ended = True
            return True
        try:
            self._guide.advance(token_id, return_tokens=False)
        except ValueError:
            return False
        self._tokens.append(token_id)
        return True

    def broken_reason(self) -> str | None:
        """Always None: outlines-core only allows what its automaton accepts."""
        return None

    def fill_bitmask(self, bitmask: torch.Tensor, row: int) -> None:
        """Write the allowed-token bits into row ``row`` of a CPU int32 ``[bs, ceil(vocab / 32)]`` mask.

        EOS bits are set only where the grammar may end; ids outside the tokenizer are never set.
        """
        words = bitmask.shape[1]
        if self._ended:
            bitmask[row].zero_()
            self._set_eos_bits(bitmask, row)
            return
        self._guide.write_mask_into(bitmask.data_ptr() + row * bitmask.stride(0) * 4, words, 4)
        if len(self.grammar.eos_token_ids) > 1 and self._guide.is_finished():
            self._set_eos_bits(bitmask, row)

    def _set_eos_bits(self, bitmask: torch.Tensor, row: int) -> None:
        view = bitmask[row].numpy().view("uint32")
        for eos in self.grammar.eos_token_ids:
            if eos < 32 * len(view):
                view[eos >> 5] |= 1 << (eos & 31)

    def is_terminated(self) -> bool:
        """True when the output is complete: EOS was accepted, or nothing but EOS may follow."""
        return self._ended or self.grammar.is_end_state(self._guide.get_state())

    @property
    def max_rollback(self) -> int:
        """How many accepted tokens ``rollback`` can undo right now."""
        return self._guide.get_allowed_rollback() + int(self._ended)

    def _rollback_tokens(self, n: int) -> None:
        self._guide.rollback_state(n)
        del self._tokens[-n:]
        del self._text_states[len(self._tokens) + 1 :]

    def copy(self) -> OutlinesMatcher:
        """An independent matcher in the same state (replays the accepted tokens: cheap, O(length))."""
        twin = OutlinesMatcher(self.grammar)
        for token_id in self._tokens:
            twin._guide.advance(token_id, return_tokens=False)
        twin._tokens = list(self._tokens)
        twin._ended = self._ended
        twin._text_states = list(self._text_states)
        return twin

    def forced_continuation(self) -> str:
        """The longest string the grammar forces next ('' if none, or if jump-forward is unavailable)."""
        fsm = self.grammar.fsm
        if fsm is None or self._ended:
            return ""
        state, pending = self._text_state()
        if state is None or pending:
            return ""
        return fsm.forced_from(state)

    def _text_state(self) -> tuple[int | None, bytes]:
        fsm = self.grammar.fsm
        token_bytes = self.grammar.vocab.token_bytes
        assert fsm is not None
        while len(self._text_states) <= len(self._tokens):
            state, pending = self._text_states[-1]
            split = _split_utf8(pending + (token_bytes[self._tokens[len(self._text_states) - 1]] or b""))
            if state is None or split is None:
                self._text_states.append((None, b""))
            else:
                self._text_states.append((fsm.advance(state, split[0]), split[1]))
        return self._text_states[-1]
