"""Grammar compilation service: validate on arrival, compile where a runaway compile can be stopped, cache.

Two engines compile grammars (``--grammar-backend``):

- ``llguidance`` (default): compiles in a thread, bounded by llguidance's fuel limits; also the only
  engine for ``ebnf`` and ``structural_tag``, which it compiles whichever backend is selected;
- ``outlines``: outlines-core in worker processes (``outlines_workers.py``), killed at the deadline.

Both run under one ``CompilePool`` (no schema starves the others) and share the byte vocabulary.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

import llguidance
import torch

from radixlm.runtime.constrained.compile_pool import CompileJob, CompilePool
from radixlm.runtime.constrained.compiled import CompiledGrammar, GrammarKey
from radixlm.runtime.constrained.grammars import LLGUIDANCE_ONLY_KINDS, check_regex, grammar_to_regex
from radixlm.runtime.constrained.json_schema import resolve_whitespace_pattern
from radixlm.runtime.constrained.llg_compiled import LLGuidanceGrammar, compile_llguidance
from radixlm.runtime.constrained.llg_grammars import llg_grammar, strengthened_grammar
from radixlm.runtime.constrained.llg_tokenizer import get_llg_tokenizer
from radixlm.runtime.constrained.outlines_workers import OutlinesWorkers
from radixlm.runtime.constrained.vocabulary import get_vocabulary

BACKENDS = ("llguidance", "outlines")


class GrammarBackend:
    """Owns the byte vocabulary, the compile pool and the LRU cache of compiled grammars.

    ``vocab_size`` is the model's logits width (the bitmask covers it; it may exceed the tokenizer).
    ``whitespace_pattern`` is the server flag ``json_whitespace_pattern``: None (bounded default),
    ``"free"``, or a regex. ``max_concurrent`` caps compiles that run young (see ``CompilePool``);
    ``compile_timeout`` is the deadline after which a compile is stopped.
    """

    def __init__(
        self,
        tokenizer: Any,
        eos_token_ids: Sequence[int],
        vocab_size: int,
        cache_size: int = 64,
        max_concurrent: int = 2,
        whitespace_pattern: str | None = None,
        backend: str = "llguidance",
        compile_timeout: float = 60.0,
    ) -> None:
        if not eos_token_ids:
            raise ValueError("constrained decoding needs at least one EOS token id")
        if backend not in BACKENDS:
            raise ValueError(f"unknown grammar backend {backend!r}: expected one of {', '.join(BACKENDS)}")
        self.backend = backend
        self.tokenizer = tokenizer
        self.eos_token_ids = tuple(eos_token_ids)
        self.vocab_size = vocab_size
        self.bitmask_words = (vocab_size + 31) // 32
        self.whitespace_pattern = resolve_whitespace_pattern(whitespace_pattern)
        self.compile_timeout = compile_timeout
        self.vocab = get_vocabulary(tokenizer, self.eos_token_ids[0], vocab_size)
        self._cache_size = cache_size
        self._cache: OrderedDict[GrammarKey, Future] = OrderedDict()
        self._lock = threading.Lock()
        self._pool = CompilePool(max_concurrent)
        self._outlines: OutlinesWorkers | None = None
        self._llg_tokenizer: llguidance.LLTokenizer | None = None

    def engine_for(self, kind: str) -> str:
        """Which engine compiles ``kind``."""
        return "llguidance" if self.backend == "llguidance" or kind in LLGUIDANCE_ONLY_KINDS else "outlines"

    @property
    def llg_tokenizer(self) -> llguidance.LLTokenizer:
        """llguidance's view of the vocabulary, built on first use."""
        with self._lock:
            if self._llg_tokenizer is None:
                self._llg_tokenizer = get_llg_tokenizer(
                    self.vocab, self.tokenizer, self.vocab_size, self.eos_token_ids
                )
            return self._llg_tokenizer

    def validate(self, kind: str, text: str) -> None:
        """Fast syntax check before the request queues; ``ValueError`` with a client-facing message."""
        if self.engine_for(kind) == "outlines":
            regex = grammar_to_regex(kind, text, self.whitespace_pattern)
            if kind == "regex":
                check_regex(regex)
            return
        grammar = llg_grammar(kind, text, self.whitespace_pattern)
        if kind == "regex":
            error = llguidance.LLMatcher.validate_grammar(grammar)
            if error:
                raise ValueError(f"invalid regex {text[:80]!r}: {_regex_reason(error)}")

    def submit(self, kind: str, text: str) -> Future:
        """Future of the compiled grammar; the same future for a cached (or in-flight) key.

        A failed or timed-out compile resolves the future with its exception and is not cached.
        """
        key = (kind, text)
        with self._lock:
            future = self._cache.get(key)
            if future is not None:
                self._cache.move_to_end(key)
                return future
            future = self._pool.submit(lambda job: self._compile(job, key), self.compile_timeout)
            self._cache[key] = future
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        future.add_done_callback(lambda f: self._forget_failed(key, f))
        return future

    def _compile(self, job: CompileJob, key: GrammarKey) -> CompiledGrammar | LLGuidanceGrammar:
        kind, text = key
        if self.engine_for(kind) == "llguidance":
            return self._compile_llguidance(key)
        with self._lock:
            if self._outlines is None:
                self._outlines = OutlinesWorkers(self.vocab)
            workers = self._outlines
        start = time.perf_counter()
        regex, index, fsm = workers.compile(job, kind, text, self.whitespace_pattern)
        return CompiledGrammar(
            key, regex, self.vocab, self.eos_token_ids, index, fsm, time.perf_counter() - start
        )

    def _compile_llguidance(self, key: GrammarKey) -> LLGuidanceGrammar:
        """Compile as given; a schema using keywords llguidance lacks is retried in its stricter
        rewrite (``strengthened_grammar``), and if that fails too the original error is raised."""
        kind, text = key
        grammar = llg_grammar(kind, text, self.whitespace_pattern)
        try:
            return compile_llguidance(key, grammar, self.llg_tokenizer, self.vocab, self.eos_token_ids)
        except ValueError as original:
            stricter = strengthened_grammar(kind, text, self.whitespace_pattern)
            if stricter is None:
                raise
            try:
                return compile_llguidance(key, stricter, self.llg_tokenizer, self.vocab, self.eos_token_ids)
            except ValueError:
                raise original from None

    def _forget_failed(self, key: GrammarKey, future: Future) -> None:
        if future.cancelled() or future.exception() is not None:
            with self._lock:
                if self._cache.get(key) is future:
                    del self._cache[key]

    @property
    def pool_stats(self) -> dict[str, int]:
        return dict(self._pool.stats)

    def new_bitmask(self, batch_size: int) -> torch.Tensor:
        """A zeroed CPU int32 ``[batch_size, ceil(vocab_size / 32)]`` mask for ``fill_bitmask``."""
        return torch.zeros(batch_size, self.bitmask_words, dtype=torch.int32)

    def shutdown(self) -> None:
        """Stop the compile pool and the worker processes; pending compiles fail."""
        self._pool.shutdown()
        if self._outlines is not None:
            self._outlines.shutdown()


def _regex_reason(error: str) -> str:
    lines = [line.strip() for line in error.splitlines() if line.strip().startswith("error:")]
    return lines[0] if lines else error.splitlines()[0][:200]
