"""A grammar compiled by outlines-core: the token index for one constraint, shared by its requests."""

from __future__ import annotations

import time

from outlines_core import Index

from radixlm.runtime.constrained.compile_worker import compile_outlines
from radixlm.runtime.constrained.regex_fsm import RegexFSM
from radixlm.runtime.constrained.vocabulary import TokenVocabulary

GrammarKey = tuple[str, str]


class CompiledGrammar:
    """Immutable after construction (its per-state caches only grow); safe to share across threads.

    Each request follows it with its own ``GrammarMatcher(grammar)`` (``new_matcher``).
    """

    backend = "outlines"

    def __init__(
        self,
        key: GrammarKey,
        regex: str,
        vocab: TokenVocabulary,
        eos_token_ids: tuple[int, ...],
        index: Index,
        fsm: RegexFSM | None,
        compile_seconds: float,
    ) -> None:
        self.key = key
        self.regex = regex
        self.vocab = vocab
        self.eos_token_ids = eos_token_ids
        self.index = index
        self.fsm = fsm
        self.compile_seconds = compile_seconds
        self._end_states: dict[int, bool] = {}

    def new_matcher(self):
        """A fresh per-request matcher at the grammar's start."""
        from radixlm.runtime.constrained.matcher import GrammarMatcher

        return GrammarMatcher(self)

    def is_end_state(self, state: int) -> bool:
        """True when ``state`` is final and nothing but EOS may follow it (cached per state)."""
        cached = self._end_states.get(state)
        if cached is None:
            cached = self.index.is_final_state(state) and self.index.get_allowed_tokens(state) == [
                self.vocab.eos_token_id
            ]
            self._end_states[state] = cached
        return cached


def compile_grammar(
    key: GrammarKey, vocab: TokenVocabulary, eos_token_ids: tuple[int, ...], whitespace_pattern: str
) -> CompiledGrammar:
    """Build the regex, the outlines-core index and the jump-forward DFA for ``key``, in this process."""
    start = time.perf_counter()
    regex, index, fsm = compile_outlines(key[0], key[1], whitespace_pattern, vocab.outlines)
    return CompiledGrammar(key, regex, vocab, eos_token_ids, index, fsm, time.perf_counter() - start)
