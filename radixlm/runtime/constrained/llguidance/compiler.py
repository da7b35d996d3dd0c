"""The llguidance engine of ``GrammarBackend``: checks a grammar on arrival, compiles it on the pool's thread.

A compile needs no process of its own: llguidance's fuel limits (``COMPILE_LIMITS``) bound its time.
But llguidance's grammar check recurses once per rule and can overflow the native stack, killing the
process: a grammar whose structure the client writes (``ebnf``, ``structural_tag``) is built (GBNF
conversion is slow Python) and checked in a worker process (``GrammarWorkers.llguidance_grammar``),
where a crash ends only the worker and the request; the limits at the door (``request_limits``) keep
such grammars out in the first place.
"""

from __future__ import annotations

import threading
from typing import Any

import llguidance

from radixlm.runtime.constrained.compile_pool import CompileJob
from radixlm.runtime.constrained.compiled_grammar import GrammarKey
from radixlm.runtime.constrained.llguidance.grammar import LLGuidanceGrammar, compile_llguidance
from radixlm.runtime.constrained.llguidance.grammar_text import llg_grammar, strengthened_grammar
from radixlm.runtime.constrained.llguidance.tokenizer import get_llg_tokenizer
from radixlm.runtime.constrained.outlines.workers import GrammarWorkers
from radixlm.runtime.constrained.vocabulary import TokenVocabulary


class LLGuidanceCompiler:
    """Compiles ``(kind, text)`` grammars for one vocabulary; llguidance's tokenizer is built on first use.

    ``vocab_size`` is the model's logits width (``hf_tokenizer`` may have fewer tokens).
    """

    def __init__(
        self,
        vocab: TokenVocabulary,
        hf_tokenizer: Any,
        vocab_size: int,
        eos_token_ids: tuple[int, ...],
        whitespace_pattern: str,
        workers: GrammarWorkers,
    ) -> None:
        self.vocab = vocab
        self._workers = workers
        self.hf_tokenizer = hf_tokenizer
        self.vocab_size = vocab_size
        self.eos_token_ids = eos_token_ids
        self.whitespace_pattern = whitespace_pattern
        self._tokenizer: llguidance.LLTokenizer | None = None
        self._lock = threading.Lock()

    @property
    def tokenizer(self) -> llguidance.LLTokenizer:
        """llguidance's view of the vocabulary, built on first use."""
        with self._lock:
            if self._tokenizer is None:
                self._tokenizer = get_llg_tokenizer(
                    self.vocab, self.hf_tokenizer, self.vocab_size, self.eos_token_ids
                )
            return self._tokenizer

    def validate(self, kind: str, text: str) -> None:
        """Fast syntax check; ``ValueError`` with a client-facing message. ``ebnf`` and
        ``structural_tag`` are only checked for being non-empty here: the worker builds them."""
        if kind in _CLIENT_STRUCTURED:
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"{kind} must be a non-empty grammar")
            return
        grammar = llg_grammar(kind, text, self.whitespace_pattern)
        if kind == "regex":
            error = llguidance.LLMatcher.validate_grammar(grammar)
            if error:
                raise ValueError(f"invalid regex {text[:80]!r}: {_regex_reason(error)}")

    def compile(self, job: CompileJob, key: GrammarKey) -> LLGuidanceGrammar:
        """Compile as given; a schema using keywords llguidance lacks is retried in its stricter
        rewrite (``strengthened_grammar``), and if that fails too the original error is raised."""
        kind, text = key
        if kind in _CLIENT_STRUCTURED:
            grammar = self._workers.llguidance_grammar(job, kind, text, self.whitespace_pattern)
        else:
            grammar = llg_grammar(kind, text, self.whitespace_pattern)
        try:
            return compile_llguidance(key, grammar, self.tokenizer, self.vocab, self.eos_token_ids)
        except ValueError as original:
            stricter = strengthened_grammar(kind, text, self.whitespace_pattern)
            if stricter is None:
                raise
            try:
                return compile_llguidance(key, stricter, self.tokenizer, self.vocab, self.eos_token_ids)
            except ValueError:
                raise original from None

    def shutdown(self) -> None:
        """Nothing to stop: a running compile ends by itself, bounded by its fuel."""


_CLIENT_STRUCTURED = ("ebnf", "structural_tag")


def _regex_reason(error: str) -> str:
    lines = [line.strip() for line in error.splitlines() if line.strip().startswith("error:")]
    return lines[0] if lines else error.splitlines()[0][:200]
