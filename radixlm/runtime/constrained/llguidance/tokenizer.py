"""The llguidance tokenizer, built from our byte-exact vocabulary (no network, no tokenizer.json).

llguidance needs every token's bytes: it gets ``TokenVocabulary.token_bytes`` (the same table
outlines-core is built from), special tokens as ``0xFF`` + name (llguidance's convention, so they never
match grammar text), and ids past the tokenizer up to the model's logits width as unused specials.
"""

from __future__ import annotations

import threading
from typing import Any

import llguidance

from radixlm.runtime.constrained.vocabulary import TokenVocabulary


class _ByteTokenizer:
    """The duck-typed tokenizer ``llguidance.LLTokenizer`` accepts (a ``TokenizerWrapper`` lookalike)."""

    def __init__(self, vocab: TokenVocabulary, hf_tokenizer: Any, n_vocab: int) -> None:
        self.eos_token_id = vocab.eos_token_id
        self.bos_token_id = None
        self.tokens = [
            vocab.token_bytes[i] if i < vocab.size and vocab.token_bytes[i] else b"\xff[special_%d]" % i
            for i in range(n_vocab)
        ]
        self.special_token_ids = [i for i in range(n_vocab) if i >= vocab.size or not vocab.token_bytes[i]]
        self.is_tokenizer_wrapper = True
        self._hf = hf_tokenizer

    def __call__(self, text: Any) -> list[int]:
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        return list(self._hf.encode(text, add_special_tokens=False))


_CACHE: dict[int, tuple[TokenVocabulary, int, llguidance.LLTokenizer]] = {}
_LOCK = threading.Lock()


def get_llg_tokenizer(
    vocab: TokenVocabulary, hf_tokenizer: Any, n_vocab: int, eos_token_ids: tuple[int, ...]
) -> llguidance.LLTokenizer:
    """The ``LLTokenizer`` for ``vocab`` with ``n_vocab`` ids (the logits width), built once (~0.3 s)."""
    with _LOCK:
        cached = _CACHE.get(id(vocab))
        if cached is not None and cached[0] is vocab and cached[1] == n_vocab:
            return cached[2]
        tokenizer = llguidance.LLTokenizer(
            _ByteTokenizer(vocab, hf_tokenizer, n_vocab),  # type: ignore[arg-type]  # duck-typed wrapper
            n_vocab=n_vocab,
            eos_token=list(eos_token_ids),
        )
        _CACHE[id(vocab)] = (vocab, n_vocab, tokenizer)
        return tokenizer
