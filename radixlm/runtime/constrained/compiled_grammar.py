"""What a compiled grammar offers, whichever backend (outlines-core, llguidance) compiled it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # the matcher protocol needs torch; a compile worker must not import it
    from radixlm.runtime.constrained.matcher_protocol import Matcher
    from radixlm.runtime.constrained.vocabulary import TokenVocabulary

GrammarKey = tuple[str, str]
"""``(kind, text)``: what a request asks for, and the key of the compiled-grammar cache."""


class CompiledGrammar(Protocol):
    """One compiled constraint, immutable and shared by all requests that ask for it."""

    @property
    def backend(self) -> str:
        """The engine that compiled it: ``"llguidance"`` or ``"outlines"``."""
        ...

    @property
    def key(self) -> GrammarKey: ...

    @property
    def vocab(self) -> TokenVocabulary: ...

    @property
    def memory_bytes(self) -> int:
        """About how much memory it holds (the compiled-grammar cache's byte budget counts this)."""
        ...

    @property
    def compile_seconds(self) -> float:
        """Wall time the compile took."""
        ...

    def new_matcher(self) -> Matcher:
        """A fresh per-request matcher at the grammar's start."""
        ...
