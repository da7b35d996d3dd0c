"""The outlines-core engine of ``GrammarBackend``: checks a grammar on arrival, compiles it in a worker."""

from __future__ import annotations

import time

from radixlm.runtime.constrained.compile_pool import CompileJob
from radixlm.runtime.constrained.compiled_grammar import GrammarKey
from radixlm.runtime.constrained.outlines.grammar import OutlinesGrammar
from radixlm.runtime.constrained.outlines.grammar_regex import check_regex, grammar_to_regex
from radixlm.runtime.constrained.outlines.workers import OutlinesWorkers
from radixlm.runtime.constrained.vocabulary import TokenVocabulary


class OutlinesCompiler:
    """Compiles ``(kind, text)`` grammars for one vocabulary; worker processes start on the first compile."""

    def __init__(
        self, vocab: TokenVocabulary, eos_token_ids: tuple[int, ...], whitespace_pattern: str
    ) -> None:
        self.vocab = vocab
        self.eos_token_ids = eos_token_ids
        self.whitespace_pattern = whitespace_pattern
        self._workers = OutlinesWorkers(vocab)

    def validate(self, kind: str, text: str) -> None:
        """Fast syntax check; ``ValueError`` with a client-facing message."""
        regex = grammar_to_regex(kind, text, self.whitespace_pattern)
        if kind == "regex":
            check_regex(regex)

    def compile(self, job: CompileJob, key: GrammarKey) -> OutlinesGrammar:
        """The regex, the outlines-core index and the jump-forward DFA for ``key``, built in a worker."""
        start = time.perf_counter()
        regex, index, fsm = self._workers.compile(job, key[0], key[1], self.whitespace_pattern)
        return OutlinesGrammar(
            key, regex, self.vocab, self.eos_token_ids, index, fsm, time.perf_counter() - start
        )

    def shutdown(self) -> None:
        """Stop the worker processes."""
        self._workers.shutdown()
