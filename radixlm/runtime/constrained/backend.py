"""Grammar compilation service: validate on arrival, compile where a runaway compile can be stopped, cache.

Two engines compile grammars (``--grammar-backend``), each a ``GrammarCompiler``:

- ``llguidance`` (default, ``llguidance/``): compiles in a thread, bounded by llguidance's fuel limits;
  also the only engine for ``ebnf`` and ``structural_tag``, which it compiles whichever is selected
  (after a check in a worker process, where a stack overflow kills only the worker);
- ``outlines`` (``outlines/``): outlines-core in worker processes (checks included), killed at the
  deadline, their memory capped.

Both run under one ``CompilePool`` (no schema starves the others) and share the byte vocabulary.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any, Protocol

import torch

from radixlm.runtime.constrained.compile_pool import CompileJob, CompilePool
from radixlm.runtime.constrained.compiled_grammar import CompiledGrammar, GrammarKey
from radixlm.runtime.constrained.grammar_kinds import LLGUIDANCE_ONLY_KINDS
from radixlm.runtime.constrained.json_whitespace import resolve_whitespace_pattern
from radixlm.runtime.constrained.llguidance.compiler import LLGuidanceCompiler
from radixlm.runtime.constrained.outlines.compiler import OutlinesCompiler
from radixlm.runtime.constrained.outlines.workers import GrammarWorkers
from radixlm.runtime.constrained.vocabulary import get_vocabulary

BACKENDS = ("llguidance", "outlines")


class GrammarCompiler(Protocol):
    """One engine: checks a grammar's text, compiles it inside a ``CompilePool`` job."""

    def validate(self, kind: str, text: str) -> None:
        """Fast syntax check; ``ValueError`` with a client-facing message."""
        ...

    def compile(self, job: CompileJob, key: GrammarKey) -> CompiledGrammar:
        """The compiled grammar; ``ValueError`` for one the engine does not support."""
        ...

    def shutdown(self) -> None:
        """Stop whatever the engine runs besides the pool's threads."""
        ...


class GrammarBackend:
    """Owns the byte vocabulary, the compile pool and the LRU cache of compiled grammars.

    The cache keeps at most ``cache_size`` grammars and ``cache_bytes`` of them (``memory_bytes`` of
    each compiled grammar): a few huge grammars cannot pin gigabytes the way 64 entries could.

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
        cache_bytes: int = 512 << 20,
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
        self._workers = GrammarWorkers(self.vocab)
        self._compilers: dict[str, GrammarCompiler] = {
            "llguidance": LLGuidanceCompiler(
                self.vocab, tokenizer, vocab_size, self.eos_token_ids, self.whitespace_pattern, self._workers
            ),
            "outlines": OutlinesCompiler(
                self.vocab, self.eos_token_ids, self.whitespace_pattern, self._workers
            ),
        }
        self._cache_size = cache_size
        self._cache_bytes = cache_bytes
        self._cache: OrderedDict[GrammarKey, Future] = OrderedDict()
        self._sizes: dict[GrammarKey, int] = {}  # compiled entries' memory_bytes
        self.cached_bytes = 0
        self._lock = threading.Lock()
        self._pool = CompilePool(max_concurrent)

    def engine_for(self, kind: str) -> str:
        """Which engine compiles ``kind``."""
        return "llguidance" if self.backend == "llguidance" or kind in LLGUIDANCE_ONLY_KINDS else "outlines"

    def validate(self, kind: str, text: str) -> None:
        """Fast syntax check before the request queues; ``ValueError`` with a client-facing message."""
        self._compilers[self.engine_for(kind)].validate(kind, text)

    def submit(self, kind: str, text: str) -> Future[CompiledGrammar]:
        """Future of the compiled grammar; the same future for a cached (or in-flight) key.

        A failed or timed-out compile resolves the future with its exception and is not cached.
        """
        key = (kind, text)
        with self._lock:
            future = self._cache.get(key)
            if future is not None:
                self._cache.move_to_end(key)
                return future
            compiler = self._compilers[self.engine_for(kind)]
            future = self._pool.submit(lambda job: compiler.compile(job, key), self.compile_timeout)
            self._cache[key] = future
            self._evict()
        future.add_done_callback(lambda f: self._settle(key, f))
        return future

    def _settle(self, key: GrammarKey, future: Future) -> None:
        """A compile ended: a failure leaves the cache, a success is charged its bytes."""
        failed = future.cancelled() or future.exception() is not None
        with self._lock:
            if self._cache.get(key) is not future:
                return
            if failed:
                del self._cache[key]
                return
            self._sizes[key] = int(future.result().memory_bytes)
            self.cached_bytes += self._sizes[key]
            self._evict()

    def _evict(self) -> None:
        """Drop least recently used grammars until both budgets hold (under ``self._lock``)."""
        while self._cache and (len(self._cache) > self._cache_size or self.cached_bytes > self._cache_bytes):
            old, _ = self._cache.popitem(last=False)
            self.cached_bytes -= self._sizes.pop(old, 0)

    @property
    def pool_stats(self) -> dict[str, int]:
        return dict(self._pool.stats)

    def new_bitmask(self, batch_size: int) -> torch.Tensor:
        """A zeroed CPU int32 ``[batch_size, ceil(vocab_size / 32)]`` mask for ``fill_bitmask``."""
        return torch.zeros(batch_size, self.bitmask_words, dtype=torch.int32)

    def shutdown(self) -> None:
        """Stop the compile pool and the engines' worker processes; pending compiles fail."""
        self._pool.shutdown()
        for compiler in self._compilers.values():
            compiler.shutdown()
        self._workers.shutdown()
