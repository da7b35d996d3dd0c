"""A text's token ids straight from a Hugging Face tokenizer's Rust backend, when that is the same.

``tokenizer(text)["input_ids"]`` spends most of a short sentence's time in Python (argument checks,
setting the backend's truncation and padding, building a ``BatchEncoding``): about 0.3 ms of a
batch-1 MiniLM embedding's 12 ms, against 0.1 ms for the backend's own ``encode``
(benchmarks/log/embeddings.md). The backend is used only where it gives the same ids: a plain
``tokenizers.Tokenizer`` with no truncation or padding set and special tokens treated as the wrapper
does, under a class that does not override how the wrapper encodes; the first text is encoded both
ways and a mismatch turns the shortcut off for that tokenizer.
"""

from __future__ import annotations

from typing import Any

_CHECKED = "_radixlm_backend_ok"  # set on the tokenizer: True / False once the first text compared
_PLAIN: dict[Any, bool] = {}  # tokenizer class -> whether it encodes as the library's base class


def encode_text(tokenizer: Any, text: str) -> list[int]:
    """``list(tokenizer(text)["input_ids"])``, by the backend when it answers the same."""
    verdict = getattr(tokenizer, _CHECKED, None)
    if verdict is False or not _backend_usable(tokenizer):
        return list(tokenizer(text)["input_ids"])
    ids = tokenizer._tokenizer.encode(text, add_special_tokens=True).ids
    if verdict is None:
        same = ids == list(tokenizer(text)["input_ids"])
        setattr(tokenizer, _CHECKED, same)
        if not same:
            return list(tokenizer(text)["input_ids"])
    return ids


def _backend_usable(tokenizer: Any) -> bool:
    backend = getattr(tokenizer, "_tokenizer", None)
    if backend is None or type(backend).__module__.split(".")[0] != "tokenizers":
        return False
    cls = type(tokenizer)
    plain = _PLAIN.get(cls)
    if plain is None:
        plain = _PLAIN[cls] = _plain_class(cls)
    if not plain:
        return False
    split = bool(getattr(tokenizer, "split_special_tokens", False))
    return (
        backend.truncation is None
        and backend.padding is None
        and bool(getattr(backend, "encode_special_tokens", split)) == split
    )


def _plain_class(cls: Any) -> bool:
    """No class below the library's fast-tokenizer base redefines how a text is encoded."""
    for klass in cls.__mro__:
        if klass.__module__.startswith("transformers.tokenization_utils"):
            return True
        if any(name in vars(klass) for name in ("__call__", "_encode_plus", "_batch_encode_plus", "encode")):
            return False
    return False
