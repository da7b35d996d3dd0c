"""RadixAttention's data structure: a radix tree over token ids whose values are KV slot indices."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator, Sequence

import torch

from radixlm.radix.key import as_key, common_prefix_len
from radixlm.radix.metrics import CacheMetrics
from radixlm.radix.prefix_cache import MatchResult, SlotFreer
from radixlm.radix.tree_node import TreeNode


class RadixCache:
    """A prefix cache over token ids (page size 1). Slot ownership is tabled in ``prefix_cache``.

    Every token in the tree is either evictable (its node has ``lock_ref == 0``) or protected, and
    ``evictable_size() + protected_size() == total_size()`` always.
    """

    def __init__(self, allocator: SlotFreer, device: str | torch.device | None = None) -> None:
        """``allocator`` receives evicted slots; ``device`` (default: ``allocator.device`` if it has one,
        else CPU) is where slot tensors live, so empty results concatenate with the caller's."""
        self.allocator = allocator
        self.device = torch.device(device if device is not None else getattr(allocator, "device", "cpu"))
        self._empty = torch.empty(0, dtype=torch.int64, device=self.device)
        self.reset()

    def reset(self) -> None:
        """Drop the whole tree and zero the metrics. Frees nothing: the caller clears the allocator.

        Only valid when no request holds a lock (``flush_cache`` when idle).
        """
        self._clock = itertools.count(1)
        self.root = TreeNode((), self._empty, None, 0)
        self._evictable = 0
        self._protected = 0
        self._num_nodes = 0
        self.metrics = CacheMetrics()

    # ---- lookup and insertion ------------------------------------------------------------------

    def match_prefix(self, token_ids: Sequence[int], *, count: bool = True) -> MatchResult:
        """Longest cached prefix of ``token_ids``: its slots and the node that ends exactly at it.

        May split a node so that ``last_node`` ends at the match; touches the LRU time of the path;
        never changes ownership. Counts hit-rate metrics only when ``count``. Callers that need a token
        left to compute (for logits) pass ``token_ids[:-1]``.
        """
        key = as_key(token_ids)
        tick = next(self._clock)
        node = self.root
        node.last_access = tick
        values: list[torch.Tensor] = []
        pos = 0
        while pos < len(key):
            child = node.children.get(key[pos])
            if child is None:
                break
            n = common_prefix_len(child.key, key, pos)
            if n < len(child.key):
                child = self._split(child, n)
            child.last_access = tick
            values.append(child.value)
            pos += n
            node = child
        if count:
            self.metrics.record_match(len(key), pos)
        slots = torch.cat(values) if values else self._empty
        return MatchResult(slots, node)

    def insert(self, token_ids: Sequence[int], slots: torch.Tensor) -> int:
        """Cache ``token_ids`` with their KV ``slots``; return the length already cached before.

        Ownership: the tree takes ``slots[returned:]`` (it keeps a copy of the indices, so the caller
        may reuse its tensor or ``req_to_token`` row). ``slots[:returned]`` stay the caller's: those it
        got from ``match_prefix`` are the tree's own; the rest are duplicates the caller must free.
        """
        key = as_key(token_ids)
        if slots.numel() != len(key):
            raise ValueError(f"insert: {len(key)} token ids but {slots.numel()} slots")
        tick = next(self._clock)
        node = self.root
        node.last_access = tick
        pos = 0
        while pos < len(key):
            child = node.children.get(key[pos])
            if child is None:
                self._add_leaf(node, key[pos:], slots[pos:], tick)
                break
            n = common_prefix_len(child.key, key, pos)
            if n < len(child.key):
                child = self._split(child, n)
            child.last_access = tick
            pos += n
            node = child
        return pos

    def _add_leaf(self, parent: TreeNode, key: tuple[int, ...], slots: torch.Tensor, tick: int) -> None:
        value = slots.to(device=self.device, dtype=torch.int64, copy=True)
        parent.children[key[0]] = TreeNode(key, value, parent, tick)
        self._evictable += len(key)
        self._num_nodes += 1

    def _split(self, node: TreeNode, at: int) -> TreeNode:
        self._num_nodes += 1
        return node.split(at)

    # ---- locking ---------------------------------------------------------------------------------

    def inc_lock(self, node: TreeNode) -> None:
        """Protect the path ``node``..root from eviction (one more user). Locking the root is a no-op."""
        self._check_attached(node)
        for step in self._path(node):
            if step.lock_ref == 0 and step.value.numel():
                self._evictable -= len(step.key)
                self._protected += len(step.key)
            step.lock_ref += 1

    def dec_lock(self, node: TreeNode) -> None:
        """Undo one ``inc_lock(node)``. Unlocking the root is a no-op."""
        self._check_attached(node)
        # NOTE: a node's lock_ref never exceeds its parent's, so if ``node`` is locked its whole path is.
        if node is not self.root and node.lock_ref == 0:
            raise RuntimeError("dec_lock on a node that is not locked")
        for step in self._path(node):
            step.lock_ref -= 1
            if step.lock_ref == 0 and step.value.numel():
                self._evictable += len(step.key)
                self._protected -= len(step.key)

    def _check_attached(self, node: TreeNode) -> None:
        if node.parent is None and node is not self.root:
            raise RuntimeError("lock on a node that is no longer in the tree (evicted or reset)")

    def _path(self, node: TreeNode) -> Iterator[TreeNode]:
        """``node`` and its ancestors up to the root, the root excluded (``node`` is attached)."""
        step: TreeNode | None = node
        while step is not None and step is not self.root:
            yield step
            step = step.parent

    # ---- eviction --------------------------------------------------------------------------------

    def evict(self, num_tokens: int) -> int:
        """Free at least ``num_tokens`` tokens if that many are evictable; return the tokens freed.

        Least recently used unlocked leaves go first; a parent left childless and unlocked becomes a
        leaf and is evictable in turn. Whole nodes are evicted, so the result may exceed the request.
        The freed slots go to the allocator in one ``free`` call.
        """
        if num_tokens <= 0:
            return 0
        tiebreak = itertools.count()
        heap = [(leaf.last_access, next(tiebreak), leaf) for leaf in self._unlocked_leaves()]
        heapq.heapify(heap)
        freed: list[torch.Tensor] = []
        num_freed = 0
        while num_freed < num_tokens and heap:
            _, _, leaf = heapq.heappop(heap)
            parent = leaf.parent
            assert parent is not None, "an evictable leaf is attached"
            del parent.children[leaf.key[0]]
            leaf.parent = None
            freed.append(leaf.value)
            num_freed += len(leaf.key)
            self._evictable -= len(leaf.key)
            self._num_nodes -= 1
            if parent is not self.root and parent.lock_ref == 0 and parent.is_leaf():
                heapq.heappush(heap, (parent.last_access, next(tiebreak), parent))
        if freed:
            self.allocator.free(torch.cat(freed))
        self.metrics.evicted_tokens += num_freed
        return num_freed

    def _nodes(self) -> Iterator[TreeNode]:
        """Every node but the root."""
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())

    def _unlocked_leaves(self) -> Iterator[TreeNode]:
        return (n for n in self._nodes() if n.is_leaf() and n.lock_ref == 0)

    # ---- sizes, integrity, metrics ---------------------------------------------------------------

    def evictable_size(self) -> int:
        return self._evictable

    def protected_size(self) -> int:
        return self._protected

    def total_size(self) -> int:
        return self._evictable + self._protected

    def all_slots(self) -> torch.Tensor:
        """Every slot held by the tree (for the KV ownership integrity check)."""
        values = [n.value for n in self._nodes()]
        return torch.cat(values) if values else self._empty

    def check_invariants(self) -> None:
        """Raise AssertionError if structure, locks, sizes or slot uniqueness are broken."""
        evictable = protected = num_nodes = 0
        for node in self._nodes():
            num_nodes += 1
            require(len(node.key) > 0, f"{node}: empty key")
            require(node.value.dtype == torch.int64 and node.value.dim() == 1, f"{node}: bad value tensor")
            self._check_tiers(node)
            require(
                node.parent is not None and node.parent.children.get(node.key[0]) is node,
                f"{node}: not its parent's child under its first token",
            )
            require(
                node.lock_ref >= sum(c.lock_ref for c in node.children.values()),
                f"{node}: lock_ref below its children's sum",
            )
            if not node.value.numel():
                pass  # held by a lower tier only (``TieredRadixCache``): not in the pool's sizes
            elif node.lock_ref == 0:
                evictable += len(node.key)
            else:
                protected += len(node.key)
        require(self.root.lock_ref == 0 and len(self.root.key) == 0, "root changed")
        require(num_nodes == self._num_nodes, f"node count {self._num_nodes} != actual {num_nodes}")
        require(evictable == self._evictable, f"evictable {self._evictable} != actual {evictable}")
        require(protected == self._protected, f"protected {self._protected} != actual {protected}")
        slots = self.all_slots()
        require(slots.unique().numel() == slots.numel(), "a slot is held twice by the tree")

    def _check_tiers(self, node: TreeNode) -> None:
        require(node.value.numel() == len(node.key), f"{node}: key and value lengths differ")

    def stats(self) -> dict:
        """``hit_tokens``, ``requested_tokens``, ``hit_rate``, ``evicted_tokens``, ``num_nodes``,
        ``cached_tokens``."""
        return self.metrics.as_dict(self._num_nodes, self.total_size())


def require(cond: bool, message: str) -> None:
    if not cond:
        raise AssertionError(message)
