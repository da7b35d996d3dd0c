"""A grammar compiled by outlines-core: the token index for one constraint, shared by its requests."""

from __future__ import annotations

from outlines_core import Index

from radixlm.runtime.constrained.compiled_grammar import GrammarKey
from radixlm.runtime.constrained.matcher_protocol import Matcher
from radixlm.runtime.constrained.outlines.matcher import OutlinesMatcher
from radixlm.runtime.constrained.outlines.regex_fsm import RegexFSM
from radixlm.runtime.constrained.vocabulary import TokenVocabulary


class OutlinesGrammar:
    """Immutable after construction (its per-state caches only grow); safe to share across threads.

    Each request follows it with its own ``OutlinesMatcher`` (``new_matcher``).
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
        self.memory_bytes = len(regex)  # the compiler sets what the index took to send from the worker
        self._end_states: dict[int, bool] = {}

    def new_matcher(self) -> Matcher:
        """A fresh per-request matcher at the grammar's start."""
        return OutlinesMatcher(self)

    def is_end_state(self, state: int) -> bool:
        """True when ``state`` is final and nothing but EOS may follow it (cached per state)."""
        cached = self._end_states.get(state)
        if cached is None:
            cached = self.index.is_final_state(state) and self.index.get_allowed_tokens(state) == [
                self.vocab.eos_token_id
            ]
            self._end_states[state] = cached
        return cached
