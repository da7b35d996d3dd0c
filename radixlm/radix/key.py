"""Token-id keys of the radix tree: normalisation and fast common-prefix comparison."""

from __future__ import annotations

from collections.abc import Sequence

import torch

# NOTE: prefixes are compared a chunk at a time with tuple slices (C speed); only the one chunk that
# holds the first mismatch is walked token by token. A 2000-token hit costs ~30 slice comparisons.
_CHUNK = 64


def as_key(token_ids: Sequence[int] | torch.Tensor) -> tuple[int, ...]:
    """The tree's key for ``token_ids``: a tuple of Python ints (a tensor is converted with ``tolist``)."""
    if isinstance(token_ids, torch.Tensor):
        return tuple(token_ids.tolist())
    return tuple(token_ids)


def common_prefix_len(node_key: tuple[int, ...], key: tuple[int, ...], start: int) -> int:
    """Length of the common prefix of ``node_key`` and ``key[start:]``."""
    n = min(len(node_key), len(key) - start)
    i = 0
    while i < n:
        j = min(i + _CHUNK, n)
        if node_key[i:j] != key[start + i : start + j]:
            while node_key[i] == key[start + i]:
                i += 1
            return i
        i = j
    return n
