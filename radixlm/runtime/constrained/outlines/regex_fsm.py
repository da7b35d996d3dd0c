"""Character-level DFA of a grammar's regex (interegular), used only to find forced continuations.

outlines-core's index works on token ids and cannot say "the next characters must be exactly X"; this
DFA can: from a state with exactly one outgoing single-character transition that is not final, that
character is forced. Strings are cached per state.
"""

from __future__ import annotations

from typing import cast

import interegular
from interegular.fsm import anything_else

MAX_FORCED_CHARS = 1024
_NO_TRANSITIONS: dict[int, int] = {}


class RegexFSM:
    """Walks text through the DFA and reports the forced string from a state."""

    def __init__(self, regex: str) -> None:
        fsm = interegular.parse_pattern(regex).to_fsm()
        # interegular's states and symbols are NewTypes of int; here they are plain ints.
        self._map = cast("dict[int, dict[int, int]]", fsm.map)
        self._finals = fsm.finals
        self.initial: int = fsm.initial
        self._forced: dict[int, str] = {}
        # Plain data instead of interegular's alphabet, so the DFA pickles (it is built in a compile
        # worker): char -> symbol, the symbol of every other char, and each symbol's only char.
        self._symbols: dict[str, int] = {}
        self._other: int | None = None
        self._only_char: dict[int, str | None] = {}
        for symbol, members in fsm.alphabet.by_transition.items():
            real = [m for m in members if m is not anything_else]
            if len(real) < len(members):
                self._other = symbol
            self._symbols.update((m, symbol) for m in real)
            self._only_char[symbol] = real[0] if len(members) == 1 and real else None

    @classmethod
    def try_build(cls, regex: str) -> RegexFSM | None:
        """The DFA, or None when interegular cannot parse the regex (jump-forward is then off)."""
        try:
            return cls(regex)
        except Exception:  # noqa: BLE001 - interegular raises many types on syntax it lacks
            return None

    def advance(self, state: int | None, text: str) -> int | None:
        """State after reading ``text`` from ``state``; None once the text left the language."""
        for ch in text:
            symbol = self._symbols.get(ch, self._other)
            if state is None or symbol is None:
                return None
            state = self._map.get(state, _NO_TRANSITIONS).get(symbol)
        return state

    def forced_from(self, state: int) -> str:
        """Longest string every completion from ``state`` must start with, stopping at final states."""
        cached = self._forced.get(state)
        if cached is not None:
            return cached
        chars: list[str] = []
        s = state
        while s not in self._finals and len(chars) < MAX_FORCED_CHARS:
            transitions = self._map.get(s, _NO_TRANSITIONS)
            if len(transitions) != 1:
                break
            ((symbol, s),) = transitions.items()
            char = self._only_char.get(symbol)
            if char is None:
                break
            chars.append(char)
        forced = "".join(chars)
        self._forced[state] = forced
        return forced
