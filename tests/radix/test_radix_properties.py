"""Hypothesis state machine: random insert/match/lock/unlock/evict/reset against a reference model.

The model is a dict from every cached prefix (tuple of token ids) to its last token's slot, plus the
prefixes held locked. A tiny alphabet makes prefixes collide and nodes split often.
"""

from __future__ import annotations

import torch
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from radixlm.radix import RadixCache
from tests.radix.radix_fakes import FakeAllocator, depth, tree_content

NUM_SLOTS = 48
token_seqs = st.lists(st.integers(0, 2), min_size=0, max_size=8)


class RadixMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.alloc = FakeAllocator(NUM_SLOTS)
        self.cache = RadixCache(self.alloc)
        self.model: dict[tuple[int, ...], int] = {}
        self.locks: list[tuple[object, tuple[int, ...]]] = []  # (node, locked prefix)

    def _model_match(self, ids: list[int]) -> list[int]:
        out = []
        for i in range(1, len(ids) + 1):
            if tuple(ids[:i]) not in self.model:
                break
            out.append(self.model[tuple(ids[:i])])
        return out

    def _locked_prefixes(self) -> set[tuple[int, ...]]:
        return {p[:i] for _, p in self.locks for i in range(1, len(p) + 1)}

    def _take(self, n: int):
        """Allocate like the scheduler: evict when short, give up when still short."""
        if n > len(self.alloc.free_set):
            self._evict(n - len(self.alloc.free_set))
        return self.alloc.alloc(n)

    def _evict(self, n: int) -> None:
        before = tree_content(self.cache)
        free_before = set(self.alloc.free_set)
        evictable = self.cache.evictable_size()
        freed = self.cache.evict(n)
        after = tree_content(self.cache)
        removed = {p: s for p, s in before.items() if p not in after}
        assert all(after[p] == s for p, s in before.items() if p in after)
        assert self.alloc.free_set - free_before == set(removed.values())
        assert freed == len(removed)
        assert freed >= n if evictable >= n else freed == evictable
        assert not set(removed) & self._locked_prefixes()
        for p in removed:
            del self.model[p]

    @rule(ids=token_seqs, reuse_prefix=st.booleans())
    def insert(self, ids: list[int], reuse_prefix: bool) -> None:
        """Scheduler-style: lock the match, compute the rest, insert, free duplicates, unlock.

        Without ``reuse_prefix`` the caller recomputed everything, so the whole cached part is duplicate.
        """
        m = self.cache.match_prefix(ids, count=False)
        self.cache.inc_lock(m.last_node)
        self.locks.append((m.last_node, tuple(ids[: m.slots.numel()])))
        prefix_len = m.slots.numel() if reuse_prefix else 0
        fresh = self._take(len(ids) - prefix_len)
        if fresh is not None:
            slots = torch.cat([m.slots[:prefix_len], fresh])
            expected_cached = len(self._model_match(ids))
            cached = self.cache.insert(ids, slots)
            assert cached == expected_cached
            self.alloc.free(slots[prefix_len:cached])
            for i in range(cached, len(ids)):
                self.model[tuple(ids[: i + 1])] = int(slots[i])
        self.cache.dec_lock(m.last_node)
        self.locks.pop()

    @rule(ids=token_seqs)
    def match(self, ids: list[int]) -> None:
        m = self.cache.match_prefix(ids)
        assert m.slots.tolist() == self._model_match(ids)
        assert depth(m.last_node) == m.slots.numel()

    @rule(ids=token_seqs)
    def lock(self, ids: list[int]) -> None:
        m = self.cache.match_prefix(ids, count=False)
        self.cache.inc_lock(m.last_node)
        self.locks.append((m.last_node, tuple(ids[: m.slots.numel()])))

    @precondition(lambda self: self.locks)
    @rule(index=st.integers(0, 100))
    def unlock(self, index: int) -> None:
        node, _ = self.locks.pop(index % len(self.locks))
        self.cache.dec_lock(node)

    @rule(n=st.integers(0, 20))
    def evict(self, n: int) -> None:
        self._evict(n)

    @precondition(lambda self: not self.locks)
    @rule()
    def reset(self) -> None:
        held = self.cache.all_slots()
        self.cache.reset()
        self.alloc.free(held)  # the caller clears the allocator
        self.model.clear()

    @invariant()
    def consistent(self) -> None:
        self.cache.check_invariants()
        assert tree_content(self.cache) == self.model
        held = self.cache.all_slots().tolist()
        assert not set(held) & self.alloc.free_set
        assert len(held) + len(self.alloc.free_set) == NUM_SLOTS
        assert (
            self.cache.total_size() == self.cache.evictable_size() + self.cache.protected_size() == len(held)
        )
        assert self.cache.protected_size() == len(self._locked_prefixes())
        for node, prefix in self.locks:
            assert node.parent is not None or not prefix  # still attached
            assert depth(node) == len(prefix)


RadixMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=30, deadline=None)
TestRadixProperties = RadixMachine.TestCase
