"""Character-level DFA of a grammar's regex (interegular), used only to find forced continuations.

outlines-core's index works on token ids and cannot say "the next characters must be exactly X"; this
DFA can: from a state with exactly one outgoing single-character transition that is not final, that
character is forced. Strings are cached per state.
"""
from __future__ import annotations

from typing import Optional

import interegular
from interegular.fsm import anything_else

MAX_FORCED_CHARS = 1024


class RegexFSM:
    """Walks text through the DFA and reports the forced string from a state."""

    def __init__(self, regex: str) -> None:
        fsm = interegular.parse_pattern(regex).to_fsm()
        self._map = fsm.map
        self._alphabet = fsm.alphabet
        self._finals = fsm.finals
        self.initial: int = fsm.initial
        self._forced: dict[int, str] = {}

    @classmethod
    def try_build(cls, regex: str) -> Optional["RegexFSM"]:
        """The DFA, or None when interegular cannot parse the regex (jump-forward is then off)."""
        try:
            return cls(regex)
        except Exception:  # noqa: BLE001 - interegular raises many types on syntax it lacks
            return None

    def advance(self, state: Optional[int], text: str) -> Optional[int]:
        """State after reading ``text`` from ``state``; None once the text left the language."""
        for ch in text:
            if state is None:
                return None
            state = self._map.get(state, {}).get(self._alphabet[ch])
        return state

    def forced_from(self, state: int) -> str:
        """Longest string every completion from ``state`` must start with, stopping at final states."""
        cached = self._forced.get(state)
        if cached is not None:
            return cached
        chars: list[str] = []
        s = state
        while s not in self._finals and len(chars) < MAX_FORCED_CHARS:
            transitions = self._map.get(s, {})
            if len(transitions) != 1:
                break
            ((symbol, s),) = transitions.items()
            members = self._alphabet.by_transition[symbol]
            if len(members) != 1 or members[0] is anything_else:
                break
            chars.append(members[0])
        forced = "".join(chars)
        self._forced[state] = forced
        return forced
