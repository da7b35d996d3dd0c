"""Disabled mode, the factory, and the release path shared by both prefix caches."""

from __future__ import annotations

import pytest
import torch

from radixlm.radix import NoRadixCache, RadixCache, create_prefix_cache
from tests.radix.radix_fakes import FakeAllocator


def test_factory_picks_the_implementation() -> None:
    assert isinstance(create_prefix_cache(FakeAllocator(), disabled=False), RadixCache)
    assert isinstance(create_prefix_cache(FakeAllocator(), disabled=True), NoRadixCache)


def test_disabled_cache_never_hits_and_owns_nothing() -> None:
    alloc = FakeAllocator()
    cache = NoRadixCache(alloc)
    slots = alloc.alloc(3)
    assert cache.insert([1, 2, 3], slots) == 3  # caller frees all three
    assert alloc.free_calls == 0  # insert itself frees nothing
    m = cache.match_prefix([1, 2, 3])
    assert m.slots.numel() == 0 and m.slots.dtype == torch.int64 and m.last_node is cache.root
    cache.inc_lock(m.last_node)
    cache.dec_lock(m.last_node)
    assert cache.evict(10) == 0
    assert (cache.total_size(), cache.evictable_size(), cache.protected_size()) == (0, 0, 0)
    assert cache.all_slots().numel() == 0
    cache.match_prefix([1], count=False)
    assert cache.stats() == {
        "hit_tokens": 0,
        "requested_tokens": 3,
        "hit_rate": 0.0,
        "evicted_tokens": 0,
        "num_nodes": 0,
        "cached_tokens": 0,
    }
    cache.reset()
    assert cache.stats()["requested_tokens"] == 0
    cache.check_invariants()
    with pytest.raises(ValueError):
        cache.insert([1, 2], slots)


@pytest.mark.parametrize("disabled", [False, True])
def test_scheduler_release_path_conserves_slots(disabled: bool) -> None:
    """Requests sharing a prefix run through one release path; every slot ends free or in the tree."""
    alloc = FakeAllocator(64)
    cache = create_prefix_cache(alloc, disabled)
    prompts = [[1, 2, 3, 4, 5], [1, 2, 3, 9], [1, 2, 3, 4, 5, 6, 7], [8, 8]]
    for ids in prompts:
        m = cache.match_prefix(ids)
        cache.inc_lock(m.last_node)
        prefix_len = m.slots.numel()
        slots = torch.cat([m.slots, alloc.alloc(len(ids) - prefix_len)])
        cached = cache.insert(ids, slots)
        alloc.free(slots[prefix_len:cached])
        cache.dec_lock(m.last_node)
        cache.check_invariants()
        held = set(cache.all_slots().tolist())
        assert not held & alloc.free_set and len(held) + len(alloc.free_set) == 64
    assert cache.evictable_size() == cache.total_size() == (0 if disabled else 10)
    cache.evict(cache.evictable_size())
    assert len(alloc.free_set) == 64
