"""The disabled prefix cache (``--disable-radix-cache``): same interface, caches nothing."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from radixlm.radix.key import as_key
from radixlm.radix.metrics import CacheMetrics
from radixlm.radix.prefix_cache import MatchResult, SlotFreer
from radixlm.radix.tree_node import TreeNode


class NoRadixCache:
    """A prefix cache that never hits and never owns a slot; the baseline for benchmarks.

    ``insert`` returns ``len(token_ids)``: by the shared contract the caller then frees every slot it
    computed (its matched prefix is always empty), so its release path is the same as with
    ``RadixCache``. ``insert`` itself frees nothing.
    """

    def __init__(self, allocator: SlotFreer, device: str | torch.device | None = None) -> None:
        """``allocator`` is unused (nothing is ever evicted); it is taken for interface parity."""
        self.allocator = allocator
        self.device = torch.device(device if device is not None else getattr(allocator, "device", "cpu"))
        self._empty = torch.empty(0, dtype=torch.int64, device=self.device)
        self.root = TreeNode((), self._empty, None, 0)
        self.metrics = CacheMetrics()

    def match_prefix(self, token_ids: Sequence[int], *, count: bool = True) -> MatchResult:
        """Always the empty match at the root; counts requested tokens when ``count``."""
        if count:
            self.metrics.record_match(len(token_ids), 0)
        return MatchResult(self._empty, self.root)

    def insert(self, token_ids: Sequence[int], slots: torch.Tensor) -> int:
        """Take ownership of nothing; return ``len(token_ids)`` so the caller frees all its slots."""
        num_tokens = len(as_key(token_ids))
        if slots.numel() != num_tokens:
            raise ValueError(f"insert: {num_tokens} token ids but {slots.numel()} slots")
        return num_tokens

    def inc_lock(self, node: TreeNode) -> None:
        """No-op: the only node handed out is the root."""

    def dec_lock(self, node: TreeNode) -> None:
        """No-op: the only node handed out is the root."""

    def evict(self, num_tokens: int) -> int:
        return 0

    def evictable_size(self) -> int:
        return 0

    def protected_size(self) -> int:
        return 0

    def total_size(self) -> int:
        return 0

    def all_slots(self) -> torch.Tensor:
        return self._empty

    def reset(self) -> None:
        """Zero the metrics (there is nothing else to drop)."""
        self.metrics = CacheMetrics()

    def check_invariants(self) -> None:
        if self.root.children or self.root.key:
            raise AssertionError("the disabled cache's root gained content")

    def stats(self) -> dict:
        return self.metrics.as_dict(0, 0)
