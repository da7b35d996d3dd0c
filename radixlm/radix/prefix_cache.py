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

from collections.abc import Sequence
from typing import NamedTuple, Protocol

import torch

from radixlm.radix.tree_node import TreeNode


class SlotFreer(Protocol):
    """What the cache needs from a KV slot allocator: a way to give slots back."""

    def free(self, slots: torch.Tensor) -> None: ...


class MatchResult(NamedTuple):
    """The longest cached prefix of a query."""

    slots: torch.Tensor  # int64 [matched_len]: KV slots of the matched prefix (a copy, safe to keep)
    last_node: TreeNode  # deepest node covering the match, ending exactly at it (root if none)
    # ``TieredRadixCache`` only: tokens past the match that a lower tier holds, and the node they end at
    host_len: int = 0
    host_node: TreeNode | None = None


class PrefixCache(Protocol):
    """The interface the scheduler uses; see the module docstring for slot ownership.

    ``RadixCache`` implements it as a tree; ``NoRadixCache`` caches nothing, so a baseline without
    prefix sharing runs through exactly the same release path.
    """

    root: TreeNode

    def match_prefix(self, token_ids: Sequence[int], *, count: bool = True) -> MatchResult:
        """The longest cached prefix of ``token_ids``: its slots and the node it ends at.

        May split a node so that the match ends exactly at one; never changes who owns a slot and
        takes no lock (call ``inc_lock(result.last_node)`` before relying on the slots). ``count``
        says whether the lookup counts toward the hit-rate metrics.
        """
        ...

    def insert(self, token_ids: Sequence[int], slots: torch.Tensor) -> int:
        """Give the tree the KV ``slots`` of ``token_ids``; returns how many leading tokens it had already.

        The tree takes ownership of ``slots[cached:]``; the caller still owns ``slots[:cached]``
        (duplicates of the tree's own, or its own prefix) and frees what is not the tree's.
        """
        ...

    def inc_lock(self, node: TreeNode) -> None:
        """Protect the path from ``node`` to the root from eviction, one more user."""
        ...

    def dec_lock(self, node: TreeNode) -> None:
        """Undo one ``inc_lock(node)``; the path becomes evictable when no user is left."""
        ...

    def evict(self, num_tokens: int) -> int:
        """Free at least ``num_tokens`` (if that many are evictable) into the allocator, least recently
        used unlocked leaves first; returns the number of tokens freed."""
        ...

    def evictable_size(self) -> int:
        """Tokens held by the tree that no lock protects."""
        ...

    def protected_size(self) -> int:
        """Tokens held by the tree on locked paths."""
        ...

    def total_size(self) -> int:
        """Every token the tree holds: ``evictable_size() + protected_size()``."""
        ...

    def all_slots(self) -> torch.Tensor:
        """Every slot the tree owns (for the KV ownership integrity check)."""
        ...

    def reset(self) -> None:
        """Drop everything and zero the metrics, freeing nothing (the caller clears the allocator).

        Only valid while no request holds a lock (``flush_cache`` when idle).
        """
        ...

    def check_invariants(self) -> None:
        """Raise ``AssertionError`` if structure, locks, sizes or slot uniqueness are broken."""
        ...

    def stats(self) -> dict:
        """Hit-rate and size metrics for ``get_server_info``."""
        ...
