"""A radix cache whose nodes outlive the KV pool: evicted KV sinks to a host tier and loads back.

Node states (L1 = the KV pool, L2 = the host tier):

=============================  ===============================  ===================================
``value``                      ``host_value``                   state
=============================  ===============================  ===================================
pool slots                     None                             in the pool only
pool slots                     host rows                        in the pool, backed up on the host
empty                          host rows                        on the host only (evicted from L1)
=============================  ===============================  ===================================

The pool part of the tree is closed under prefixes: a node out of the pool has its whole subtree out
too, so a match walks pool nodes first and then, possibly, host nodes. ``evict`` writes pool leaves
down to the host (write_back) instead of dropping them; with write_through every new leaf is copied
to the host at insertion, on the host's copy thread, so eviction is free: the scheduler goes on to the
forward while the copy runs, and the copy is waited for (``_settle``) before the node's pool slots or
host rows are freed or its rows read. When the host is full its least recently used entries
go: backups of pool nodes lose their host copy, host-only leaves leave the tree. ``load_back`` copies
a match's host part into fresh pool slots before a request's prefill.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable, Sequence
from typing import Protocol

import torch

from radixlm.radix.key import as_key, common_prefix_len
from radixlm.radix.prefix_cache import MatchResult, SlotFreer
from radixlm.radix.radix_cache import RadixCache, require
from radixlm.radix.tier_metrics import TierCounters
from radixlm.radix.tree_node import TreeNode

WRITE_POLICIES = ("write_back", "write_through")


class PendingCopy(Protocol):
    def wait(self) -> None:
        """Return once the copy has run."""
        ...


class HostTier(Protocol):
    """Rows of KV below the pool: a bounded arena the tree allocates from, and the copies in and out."""

    bytes_per_token: int
    num_rows: int

    def alloc(self, n: int) -> torch.Tensor | None: ...
    def free(self, rows: torch.Tensor) -> None: ...
    def available_size(self) -> int: ...
    def write(self, slots: torch.Tensor, rows: torch.Tensor) -> None:
        """Copy pool ``slots`` into host ``rows``."""
        ...

    def write_async(self, slots: torch.Tensor, rows: torch.Tensor) -> PendingCopy:
        """``write`` in the background; ``slots`` and ``rows`` stay untouched until it is waited for."""
        ...

    def read(self, rows: torch.Tensor, slots: torch.Tensor) -> None:
        """Copy host ``rows`` into pool ``slots``."""
        ...

    def close(self) -> None: ...

    def free_rows(self) -> torch.Tensor: ...
    def clear(self) -> None: ...


class TieredRadixCache(RadixCache):
    """``RadixCache`` plus a host tier under it; see the module docstring for the node states."""

    def __init__(
        self,
        allocator: SlotFreer,
        host: HostTier,
        write_policy: str = "write_back",
        device: str | torch.device | None = None,
    ) -> None:
        if write_policy not in WRITE_POLICIES:
            raise ValueError(f"hicache write policy {write_policy!r}: expected one of {WRITE_POLICIES}")
        self.host = host
        self.write_through = write_policy == "write_through"
        self._copies: dict[TreeNode, PendingCopy] = {}  # write_through copies not yet waited for
        super().__init__(allocator, device)

    def reset(self) -> None:
        """Drop the tree and the host tier's contents (the host tier belongs to the tree)."""
        for node in list(self._copies):
            self._settle(node)
        super().reset()
        self.host.clear()
        self.host_metrics = TierCounters()

    # ---- lookup, insertion, load-back ------------------------------------------------------------

    def match_prefix(self, token_ids: Sequence[int], *, count: bool = True) -> MatchResult:
        """The pool part of the longest cached prefix, and how far the host tier reaches past it."""
        key = as_key(token_ids)
        tick = next(self._clock)
        node = last_pool = self.root
        node.last_access = tick
        values: list[torch.Tensor] = []
        pos = pool_len = 0
        while pos < len(key):
            child = node.children.get(key[pos])
            if child is None:
                break
            n = common_prefix_len(child.key, key, pos)
            if n < len(child.key):
                child = self._split(child, n)
            child.last_access = tick
            pos += n
            node = child
            if child.value.numel():
                values.append(child.value)
                pool_len, last_pool = pos, child
        if count:
            self.metrics.record_match(len(key), pool_len)
        slots = torch.cat(values) if values else self._empty
        host_node = node if pos > pool_len else None
        return MatchResult(slots, last_pool, pos - pool_len, host_node)

    def insert(self, token_ids: Sequence[int], slots: torch.Tensor) -> int:
        """As ``RadixCache.insert``; host-only nodes on the path take the caller's slots back into the
        pool (the same tokens at the same positions), so the return value is where the pool part ended."""
        key = as_key(token_ids)
        if slots.numel() != len(key):
            raise ValueError(f"insert: {len(key)} token ids but {slots.numel()} slots")
        tick = next(self._clock)
        node = self.root
        node.last_access = tick
        pos = 0
        adopted_from: int | None = None
        while pos < len(key):
            child = node.children.get(key[pos])
            if child is None:
                self._add_leaf(node, key[pos:], slots[pos:], tick)
                break
            n = common_prefix_len(child.key, key, pos)
            if n < len(child.key):
                child = self._split(child, n)
            child.last_access = tick
            if not child.value.numel():
                adopted_from = pos if adopted_from is None else adopted_from
                self._set_pool_value(child, slots[pos : pos + n].to(self.device, torch.int64, copy=True))
            pos += n
            node = child
        return pos if adopted_from is None else adopted_from

    def _add_leaf(self, parent: TreeNode, key: tuple[int, ...], slots: torch.Tensor, tick: int) -> None:
        super()._add_leaf(parent, key, slots, tick)
        if self.write_through:
            self._write_down(parent.children[key[0]], drop_on_failure=False, background=True)

    def _split(self, node: TreeNode, at: int) -> TreeNode:
        head = super()._split(node, at)
        if node in self._copies:  # one copy covers both halves' rows
            self._copies[head] = self._copies[node]
        return head

    def _settle(self, node: TreeNode) -> None:
        """The completion check: ``node``'s background copy to the host, if any, has run."""
        copy = self._copies.pop(node, None)
        if copy is not None:
            copy.wait()

    def pending_copies(self) -> int:
        """Write-through copies not yet waited for (some may have run already)."""
        return len(self._copies)

    def close(self) -> None:
        """Wait for every background copy and stop the host's copy thread."""
        for node in list(self._copies):
            self._settle(node)
        self.host.close()

    def _set_pool_value(self, node: TreeNode, slots: torch.Tensor) -> None:
        node.value = slots
        if node.lock_ref:
            self._protected += len(node.key)
        else:
            self._evictable += len(node.key)

    def load_back(self, token_ids: Sequence[int], alloc: Callable[[int], torch.Tensor | None]) -> int:
        """Bring the host part of ``token_ids``' match into the pool; returns the tokens loaded.

        ``alloc`` takes pool slots (it may evict, which may write other nodes down); the matched path is
        locked meanwhile so neither its pool part nor its host part can go. 0 when nothing is on the
        host or the pool has no room (the request then computes those tokens).
        """
        match = self.match_prefix(token_ids, count=False)
        if match.host_node is None:
            return 0
        self.inc_lock(match.host_node)
        try:
            slots = alloc(match.host_len)
            if slots is None:
                return 0
            start = time.perf_counter()
            path = list(self._path(match.host_node))[::-1]  # only the host part: the match ends there
            path = [n for n in path if not n.value.numel()]
            for n in path:
                self._settle(n)
            rows = torch.cat([n.host_value for n in path if n.host_value is not None])
            self.host.read(rows, slots)
            offset = 0
            for n in path:
                self._set_pool_value(n, slots[offset : offset + len(n.key)].to(self.device, copy=True))
                offset += len(n.key)
            self.host_metrics.record_load(
                match.host_len, match.host_len * self.host.bytes_per_token, time.perf_counter() - start
            )
            return match.host_len
        finally:
            self.dec_lock(match.host_node)

    # ---- eviction ----------------------------------------------------------------------------------

    def evict(self, num_tokens: int) -> int:
        """Free at least ``num_tokens`` pool slots (if that many are evictable), least recently used
        pool leaves first, writing each down to the host tier (or dropping it when that has no room)."""
        if num_tokens <= 0:
            return 0
        tiebreak = itertools.count()
        heap = [(n.last_access, next(tiebreak), n) for n in self._nodes() if self._is_pool_leaf(n)]
        heapq.heapify(heap)
        freed: list[torch.Tensor] = []
        num_freed = 0
        while num_freed < num_tokens and heap:
            _, _, leaf = heapq.heappop(heap)
            parent = leaf.parent
            assert parent is not None, "an evictable leaf is attached"
            self._settle(leaf)  # its slots go back to the allocator: its copy must have read them
            freed.append(leaf.value)
            num_freed += len(leaf.key)
            self._evictable -= len(leaf.key)
            if leaf.host_value is None:
                self._write_down(leaf, drop_on_failure=True)
            leaf.value = self._empty
            if parent is not self.root and self._is_pool_leaf(parent):
                heapq.heappush(heap, (parent.last_access, next(tiebreak), parent))
        if freed:
            self.allocator.free(torch.cat(freed))
        self.metrics.evicted_tokens += num_freed
        return num_freed

    def _is_pool_leaf(self, node: TreeNode) -> bool:
        return (
            node.lock_ref == 0
            and bool(node.value.numel())
            and not any(c.value.numel() for c in node.children.values())
        )

    def _write_down(self, node: TreeNode, drop_on_failure: bool, background: bool = False) -> None:
        """Copy ``node``'s pool KV to new host rows (on the copy thread if ``background``); if the host
        has no room even after evicting its own least recently used entries, drop ``node`` and its
        (host-only) subtree from the tree."""
        n = len(node.key)
        rows = self.host.alloc(n)
        if rows is None:
            self._evict_host(n - self.host.available_size(), keep=node)
            rows = self.host.alloc(n)
        if rows is None:
            self.host_metrics.dropped_tokens += n
            if drop_on_failure:
                self._drop(node)
            return
        if background:
            self._copies[node] = self.host.write_async(node.value, rows)
        else:
            self.host.write(node.value, rows)
        node.host_value = rows
        self.host_metrics.record_write(n, n * self.host.bytes_per_token)

    def _evict_host(self, num_tokens: int, keep: TreeNode) -> None:
        """Free at least ``num_tokens`` host rows if possible: least recently used first, a pool node
        losing only its backup, a host-only leaf leaving the tree (its parent may follow)."""
        tiebreak = itertools.count()
        heap = [(n.last_access, next(tiebreak), n) for n in self._nodes() if self._host_evictable(n, keep)]
        heapq.heapify(heap)
        num_freed = 0
        while num_freed < num_tokens and heap:
            _, _, node = heapq.heappop(heap)
            if not self._host_evictable(node, keep) or node.host_value is None:
                continue  # pushed twice
            self._settle(node)
            self.host.free(node.host_value)
            node.host_value = None
            num_freed += len(node.key)
            self.host_metrics.dropped_tokens += len(node.key)
            if node.value.numel():
                continue
            parent = node.parent
            self._detach(node)
            if parent is not None and not parent.value.numel() and self._host_evictable(parent, keep):
                heapq.heappush(heap, (parent.last_access, next(tiebreak), parent))

    def _host_evictable(self, node: TreeNode, keep: TreeNode) -> bool:
        if node is keep or node.host_value is None:
            return False
        if node.value.numel():
            return True  # only the backup goes
        return node.lock_ref == 0 and not node.children

    def _drop(self, node: TreeNode) -> None:
        """Remove ``node`` (leaving the pool) and its host-only subtree from the tree."""
        self._detach(node)
        stack = [node]
        while stack:
            step = stack.pop()
            for child in step.children.values():
                child.parent = None
                self._num_nodes -= 1
                self.host_metrics.dropped_tokens += len(child.key)
                stack.append(child)
            if step.host_value is not None:
                self._settle(step)
                self.host.free(step.host_value)
                step.host_value = None

    def _detach(self, node: TreeNode) -> None:
        parent = node.parent
        assert parent is not None
        del parent.children[node.key[0]]
        node.parent = None
        self._num_nodes -= 1

    # ---- integrity and metrics ---------------------------------------------------------------------

    def host_rows(self) -> torch.Tensor:
        """Every host row the tree holds (for the KV ownership check)."""
        rows = [n.host_value for n in self._nodes() if n.host_value is not None]
        return torch.cat(rows) if rows else self._empty

    def host_size(self) -> int:
        return int(self.host_rows().numel())

    def _check_tiers(self, node: TreeNode) -> None:
        in_pool = bool(node.value.numel())
        require(node.value.numel() in (0, len(node.key)), f"{node}: key and value lengths differ")
        if node.host_value is not None:
            require(node.host_value.numel() == len(node.key), f"{node}: key and host rows differ")
        require(in_pool or node.host_value is not None, f"{node}: held by no tier")
        if not in_pool:
            require(
                not any(c.value.numel() for c in node.children.values()), f"{node}: pool child of a host node"
            )

    def check_invariants(self) -> None:
        super().check_invariants()
        rows = self.host_rows()
        require(rows.unique().numel() == rows.numel(), "a host row is held twice by the tree")

    def stats(self) -> dict:
        """``RadixCache.stats`` plus the host tier's counters (``host_*``)."""
        host = {
            **self.host_metrics.as_dict("host"),
            "host_cached_tokens": self.host_size(),
            "host_free_tokens": self.host.available_size(),
            "host_total_tokens": self.host.num_rows,
        }
        return {**super().stats(), **host}
