"""The outlines-core engine of ``GrammarBackend``: checks a grammar on arrival, compiles it in a worker."""

from __future__ import annotations

import time

from radixlm.runtime.constrained.compile_pool import CompileJob
from radixlm.runtime.constrained.compiled_grammar import GrammarKey
from radixlm.runtime.constrained.grammar_kinds import check_regex_features
from radixlm.runtime.constrained.outlines.grammar import OutlinesGrammar
from radixlm.runtime.constrained.outlines.grammar_regex import grammar_to_regex
from radixlm.runtime.constrained.outlines.workers import GrammarWorkers
from radixlm.runtime.constrained.vocabulary import TokenVocabulary


class OutlinesCompiler:
    """Compiles ``(kind, text)`` grammars for one vocabulary in ``workers`` (they start on first use)."""

    def __init__(
        self,
        vocab: TokenVocabulary,
        eos_token_ids: tuple[int, ...],
        whitespace_pattern: str,
        workers: GrammarWorkers,
    ) -> None:
        self.vocab = vocab
        self.eos_token_ids = eos_token_ids
        self.whitespace_pattern = whitespace_pattern
        self._workers = workers

    def validate(self, kind: str, text: str) -> None:
        """Checks of the text only (``ValueError`` with a client-facing message). Whether outlines-core
        can compile a regex is learnt in the worker, under the compile's deadline and memory cap: building
        even the byte-level index of a hostile regex took minutes and gigabytes inline."""
        regex = grammar_to_regex(kind, text, self.whitespace_pattern)
        if kind == "regex":
            check_regex_features(regex)

    def compile(self, job: CompileJob, key: GrammarKey) -> OutlinesGrammar:
        """The regex, the outlines-core index and the jump-forward DFA for ``key``, built in a worker."""
        start = time.perf_counter()
        if key[0] == "regex":  # the byte-level check names what is wrong better than the full compile
            self._workers.check_regex(job, key[1])
        regex, index, fsm, size = self._workers.compile(job, key[0], key[1], self.whitespace_pattern)
        grammar = OutlinesGrammar(
            key, regex, self.vocab, self.eos_token_ids, index, fsm, time.perf_counter() - start
        )
        grammar.memory_bytes = size
        return grammar

    def shutdown(self) -> None:
        """Nothing of its own to stop: the backend stops the shared workers."""
