"""Radix-cache namespaces: KV computed under one LoRA adapter is never served to another.

The tree keys on token ids; a request under namespace ``n > 0`` keys on ``id + n * 2**40`` instead.
Real token ids are far below ``2**40``, so the keys of two namespaces never share a first token and
the trees of different adapters are disjoint below the root, while requests of one adapter share
prefixes as before. Namespace 0 (the base model) keeps the ids unchanged, at no cost.
"""

from __future__ import annotations

from collections.abc import Sequence

_SHIFT = 40


def namespaced(token_ids: Sequence[int], namespace: int) -> list[int]:
    """``token_ids`` as keys of ``namespace`` (0: unchanged)."""
    if namespace == 0:
        return list(token_ids) if not isinstance(token_ids, list) else token_ids
    offset = namespace << _SHIFT
    return [t + offset for t in token_ids]


def plain_ids(keys: Sequence[int], namespace: int, vocab_size: int) -> list[int]:
    """The token ids of ``keys`` read from ``namespace``, up to the first key that is not a token of
    the vocabulary there (an image's pad value, another namespace's key)."""
    offset = namespace << _SHIFT
    out = []
    for key in keys:
        token = key - offset
        if not 0 <= token < vocab_size:
            break
        out.append(token)
    return out
