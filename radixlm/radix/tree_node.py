"""One node of the radix tree: a run of token ids and the KV slots that hold their keys and values."""

from __future__ import annotations

import torch


class TreeNode:
    """A tree node. ``key`` (token ids) and ``value`` (int64 KV slots) have the same length.

    ``lock_ref`` counts the requests whose locked path passes through this node, so a node's
    ``lock_ref`` is at least the sum of its children's. ``last_access`` is the cache's logical clock at
    the last match or insert that walked through the node (the LRU order of eviction). The root has an
    empty key, is never locked, evicted or split, and is the only node whose ``parent`` is None while
    attached; an evicted node gets ``parent = None`` too.
    """

    __slots__ = ("key", "value", "host_value", "parent", "children", "lock_ref", "last_access")

    def __init__(
        self, key: tuple[int, ...], value: torch.Tensor, parent: TreeNode | None, last_access: int
    ) -> None:
        self.key = key
        self.value = value
        # ``TieredRadixCache`` only: the node's rows in the host tier (None: not there); an empty
        # ``value`` then means the node is out of the pool, held by the host tier alone.
        self.host_value: torch.Tensor | None = None
        self.parent = parent
        self.children: dict[int, TreeNode] = {}
        self.lock_ref = 0
        self.last_access = last_access

    def is_leaf(self) -> bool:
        return not self.children

    def split(self, at: int) -> TreeNode:
        """Split this node after ``at`` tokens; return the new parent holding ``key[:at]``.

        This node keeps ``key[at:]`` and becomes the new parent's only child.
        """
        assert self.parent is not None and 0 < at < len(self.key), "split inside a non-root node only"
        head = TreeNode(self.key[:at], self.value[:at], self.parent, self.last_access)
        # NOTE: every lock through this node also passes through its new parent, so the lock count is
        # copied; the evictable/protected totals are unchanged because no token changes lock state.
        head.lock_ref = self.lock_ref
        if self.host_value is not None:
            head.host_value, self.host_value = self.host_value[:at], self.host_value[at:]
        head.children[self.key[at]] = self
        self.parent.children[self.key[0]] = head
        self.key = self.key[at:]
        self.value = self.value[at:]
        self.parent = head
        return head

    def __repr__(self) -> str:
        return f"TreeNode(len={len(self.key)}, lock_ref={self.lock_ref}, children={len(self.children)})"
