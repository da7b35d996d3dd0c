"""The prefix-cache contract shared by ``RadixCache`` and ``NoRadixCache``.

Ownership of a request's KV slots (page size 1), the table the scheduler's release path follows:

====================================  ==========================================================
slots                                 owner
====================================  ==========================================================
``match.slots`` (``[0, prefix_len)``)  the tree; locked by ``inc_lock(match.last_node)`` while used
``[prefix_len, n)`` computed privately  the request, until it calls ``insert``
after ``cached = insert(ids, slots)``  ``[prefix_len, cached)`` are duplicates: the caller frees them;
                                      ``[cached, n)`` now belong to the tree
evicted                               the allocator (``evict`` frees them into it)
====================================  ==========================================================

So the release path is identical for both caches::

    cached = cache.insert(token_ids, slots)          # slots[:prefix_len] are the tree's own
    allocator.free(slots[prefix_len:cached])
    cache.dec_lock(old_last_node)

With the cache disabled ``prefix_len`` is always 0 and ``insert`` returns ``len(token_ids)``, so the
caller frees every slot it computed and the "tree" owns nothing.
"""
from __future__ import annotations

from typing import NamedTuple, Protocol, Sequence

import torch

from radixlm.radix.tree_node import TreeNode


class SlotFreer(Protocol):
    """What the cache needs from a KV slot allocator: a way to give slots back."""

    def free(self, slots: torch.Tensor) -> None: ...


class MatchResult(NamedTuple):
    """The longest cached prefix of a query."""

    slots: torch.Tensor  # int64 [matched_len]: KV slots of the matched prefix (a copy, safe to keep)
    last_node: TreeNode  # deepest node covering the match, ending exactly at it (root if none)


class PrefixCache(Protocol):
    """The interface the scheduler uses; see the module docstring for slot ownership."""

    root: TreeNode

    def match_prefix(self, token_ids: Sequence[int], *, count: bool = True) -> MatchResult: ...
    def insert(self, token_ids: Sequence[int], slots: torch.Tensor) -> int: ...
    def inc_lock(self, node: TreeNode) -> None: ...
    def dec_lock(self, node: TreeNode) -> None: ...
    def evict(self, num_tokens: int) -> int: ...
    def evictable_size(self) -> int: ...
    def protected_size(self) -> int: ...
    def total_size(self) -> int: ...
    def all_slots(self) -> torch.Tensor: ...
    def reset(self) -> None: ...
    def check_invariants(self) -> None: ...
    def stats(self) -> dict: ...
