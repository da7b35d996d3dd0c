"""Grammar compilation service: validate on arrival, compile off the scheduler loop, cache by key."""
from __future__ import annotations

import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Optional, Sequence

import torch

from radixlm.runtime.constrained.compiled import CompiledGrammar, GrammarKey, compile_grammar
from radixlm.runtime.constrained.grammars import check_regex, grammar_to_regex
from radixlm.runtime.constrained.json_schema import resolve_whitespace_pattern
from radixlm.runtime.constrained.vocabulary import get_vocabulary


class GrammarBackend:
    """Owns the byte vocabulary, the compile thread pool and the LRU cache of compiled grammars.

    ``vocab_size`` is the model's logits width (the bitmask covers it; it may exceed the tokenizer).
    ``whitespace_pattern`` is the server flag ``json_whitespace_pattern``: None (bounded default),
    ``"free"``, or a regex.
    """

    def __init__(self, tokenizer: Any, eos_token_ids: Sequence[int], vocab_size: int, cache_size: int = 64,
                 num_threads: int = 1, whitespace_pattern: Optional[str] = None) -> None:
        if not eos_token_ids:
            raise ValueError("constrained decoding needs at least one EOS token id")
        self.eos_token_ids = tuple(eos_token_ids)
        self.vocab_size = vocab_size
        self.bitmask_words = (vocab_size + 31) // 32
        self.whitespace_pattern = resolve_whitespace_pattern(whitespace_pattern)
        self.vocab = get_vocabulary(tokenizer, self.eos_token_ids[0], vocab_size)
        self._cache_size = cache_size
        self._cache: OrderedDict[GrammarKey, Future[CompiledGrammar]] = OrderedDict()
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=num_threads, thread_name_prefix="grammar")

    def validate(self, kind: str, text: str) -> None:
        """Fast syntax check before the request queues; ``ValueError`` with a client-facing message."""
        regex = grammar_to_regex(kind, text, self.whitespace_pattern)
        if kind == "regex":
            check_regex(regex)

    def submit(self, kind: str, text: str) -> Future[CompiledGrammar]:
        """Future of the compiled grammar; the same future for a cached (or in-flight) key.

        A failed compile resolves the future with its exception and is not cached.
        """
        key = (kind, text)
        with self._lock:
            future = self._cache.get(key)
            if future is not None:
                self._cache.move_to_end(key)
                return future
            future = self._pool.submit(compile_grammar, key, self.vocab, self.eos_token_ids,
                                       self.whitespace_pattern)
            self._cache[key] = future
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        future.add_done_callback(lambda f: self._forget_failed(key, f))
        return future

    def _forget_failed(self, key: GrammarKey, future: Future[CompiledGrammar]) -> None:
        if future.cancelled() or future.exception() is not None:
            with self._lock:
                if self._cache.get(key) is future:
                    del self._cache[key]

    def new_bitmask(self, batch_size: int) -> torch.Tensor:
        """A zeroed CPU int32 ``[batch_size, ceil(vocab_size / 32)]`` mask for ``fill_bitmask``."""
        return torch.zeros(batch_size, self.bitmask_words, dtype=torch.int32)

    def shutdown(self) -> None:
        """Stop the compile threads; pending compiles are cancelled."""
        self._pool.shutdown(wait=False, cancel_futures=True)
