"""Unit tests of RadixCache: match, split, insert, locks, eviction, sizes, metrics, invariants."""

from __future__ import annotations

import pytest
import torch

from radixlm.radix import RadixCache
from tests.radix.radix_fakes import FakeAllocator, depth, tree_content


def slots(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64)


@pytest.fixture
def alloc() -> FakeAllocator:
    return FakeAllocator()


@pytest.fixture
def cache(alloc: FakeAllocator) -> RadixCache:
    return RadixCache(alloc)


def test_empty_tree_matches_nothing(cache: RadixCache) -> None:
    m = cache.match_prefix([1, 2, 3])
    assert m.slots.dtype == torch.int64 and m.slots.numel() == 0
    assert m.last_node is cache.root
    assert cache.total_size() == 0 and cache.stats()["num_nodes"] == 0


def test_insert_returns_already_cached_length(cache: RadixCache) -> None:
    assert cache.insert([1, 2, 3], slots(10, 11, 12)) == 0
    assert cache.insert([1, 2, 3], slots(20, 21, 22)) == 3
    assert cache.insert([1, 2, 3, 4, 5], slots(10, 11, 12, 13, 14)) == 3
    assert cache.insert([1, 2], slots(30, 31)) == 2
    assert tree_content(cache) == {(1,): 10, (1, 2): 11, (1, 2, 3): 12, (1, 2, 3, 4): 13, (1, 2, 3, 4, 5): 14}
    assert cache.total_size() == cache.evictable_size() == 5
    cache.check_invariants()


def test_match_splits_node_so_last_node_ends_at_match(cache: RadixCache) -> None:
    cache.insert([1, 2, 3, 4, 5, 6], slots(10, 11, 12, 13, 14, 15))
    m = cache.match_prefix([1, 2, 3, 9])
    assert m.slots.tolist() == [10, 11, 12]
    assert m.last_node.key == (1, 2, 3) and depth(m.last_node) == 3
    assert cache.stats()["num_nodes"] == 2
    # A query that ends inside a node splits it too.
    m = cache.match_prefix([1, 2])
    assert m.slots.tolist() == [10, 11] and m.last_node.key == (1, 2)
    assert cache.stats()["num_nodes"] == 3
    assert cache.total_size() == 6
    cache.check_invariants()


def test_insert_splits_at_divergence(cache: RadixCache) -> None:
    cache.insert([1, 2, 3, 4], slots(10, 11, 12, 13))
    assert cache.insert([1, 2, 7, 8], slots(10, 11, 22, 23)) == 2
    assert cache.match_prefix([1, 2, 7, 8]).slots.tolist() == [10, 11, 22, 23]
    assert cache.match_prefix([1, 2, 3, 4]).slots.tolist() == [10, 11, 12, 13]
    assert sorted(cache.root.children[1].children) == [3, 7]
    cache.check_invariants()


def test_match_result_and_tree_are_independent_of_caller_tensors(cache: RadixCache) -> None:
    row = slots(10, 11, 12)
    cache.insert([1, 2, 3], row)
    row[:] = 0
    m = cache.match_prefix([1, 2, 3])
    assert m.slots.tolist() == [10, 11, 12]
    m.slots[:] = 0
    assert cache.match_prefix([1, 2, 3]).slots.tolist() == [10, 11, 12]


def test_insert_rejects_length_mismatch(cache: RadixCache) -> None:
    with pytest.raises(ValueError):
        cache.insert([1, 2, 3], slots(1, 2))


def test_tensor_token_ids_are_accepted(cache: RadixCache) -> None:
    cache.insert(torch.tensor([5, 6, 7]), slots(1, 2, 3))
    assert cache.match_prefix(torch.tensor([5, 6])).slots.tolist() == [1, 2]


def test_lock_moves_tokens_between_evictable_and_protected(cache: RadixCache) -> None:
    cache.insert([1, 2, 3, 4], slots(10, 11, 12, 13))
    cache.insert([1, 2, 5], slots(10, 11, 14))
    a = cache.match_prefix([1, 2, 3, 4]).last_node
    b = cache.match_prefix([1, 2, 5]).last_node
    cache.inc_lock(a)
    assert (cache.evictable_size(), cache.protected_size()) == (1, 4)
    cache.inc_lock(b)
    assert (cache.evictable_size(), cache.protected_size()) == (0, 5)
    cache.inc_lock(a)
    cache.dec_lock(a)
    cache.dec_lock(a)
    assert (cache.evictable_size(), cache.protected_size()) == (2, 3)
    cache.dec_lock(b)
    assert (cache.evictable_size(), cache.protected_size()) == (5, 0)
    cache.check_invariants()


def test_split_of_locked_node_keeps_sizes_and_lock(cache: RadixCache) -> None:
    cache.insert([1, 2, 3, 4], slots(10, 11, 12, 13))
    node = cache.match_prefix([1, 2, 3, 4]).last_node
    cache.inc_lock(node)
    head = cache.match_prefix([1, 2]).last_node  # splits the locked node
    assert head.lock_ref == 1 and node.parent is head
    assert (cache.evictable_size(), cache.protected_size()) == (0, 4)
    cache.check_invariants()
    cache.dec_lock(node)
    assert (cache.evictable_size(), cache.protected_size()) == (4, 0)
    cache.check_invariants()


def test_dec_lock_of_unlocked_node_raises(cache: RadixCache) -> None:
    cache.insert([1, 2], slots(10, 11))
    node = cache.match_prefix([1, 2]).last_node
    with pytest.raises(RuntimeError):
        cache.dec_lock(node)
    cache.dec_lock(cache.root)  # the root is a no-op either way
    cache.inc_lock(cache.root)
    assert cache.protected_size() == 0


def test_locking_an_evicted_node_raises(cache: RadixCache, alloc: FakeAllocator) -> None:
    alloc.free_set -= {10, 11}
    cache.insert([1, 2], slots(10, 11))
    node = cache.match_prefix([1, 2]).last_node
    cache.evict(2)
    with pytest.raises(RuntimeError):
        cache.inc_lock(node)


def test_evict_least_recently_used_leaf_first(cache: RadixCache, alloc: FakeAllocator) -> None:
    for first, base in ((1, 10), (2, 20), (3, 30)):
        alloc.free_set -= {base, base + 1}
        cache.insert([first, 9], slots(base, base + 1))
    cache.match_prefix([1, 9])  # touch A: B is now the oldest
    assert cache.evict(1) == 2  # whole nodes go, so more than asked is fine
    assert {20, 21} <= alloc.free_set and 10 not in alloc.free_set and 30 not in alloc.free_set
    assert cache.evict(1) == 2
    assert {30, 31} <= alloc.free_set and 10 not in alloc.free_set
    assert cache.stats()["evicted_tokens"] == 4
    cache.check_invariants()


def test_evict_never_touches_locked_nodes(cache: RadixCache, alloc: FakeAllocator) -> None:
    alloc.free_set -= {10, 11, 12, 13, 14}
    cache.insert([1, 2, 3], slots(10, 11, 12))
    cache.insert([4, 5], slots(13, 14))
    cache.inc_lock(cache.match_prefix([1, 2]).last_node)  # splits (1,2,3) -> (1,2)+(3)
    assert cache.evict(100) == 3
    assert tree_content(cache) == {(1,): 10, (1, 2): 11}
    assert {12, 13, 14} <= alloc.free_set
    assert (cache.evictable_size(), cache.protected_size()) == (0, 2)
    assert cache.evict(100) == 0
    cache.check_invariants()


def test_parents_become_evictable_leaves(cache: RadixCache, alloc: FakeAllocator) -> None:
    alloc.free_set -= {10, 11, 12, 13}
    cache.insert([1, 2, 3], slots(10, 11, 12))
    cache.insert([1, 2, 4], slots(10, 11, 13))
    assert cache.stats()["num_nodes"] == 3
    assert cache.evict(4) == 4
    assert cache.total_size() == 0 and cache.stats()["num_nodes"] == 0
    assert {10, 11, 12, 13} <= alloc.free_set
    assert alloc.free_calls == 1  # one batched free per evict call
    assert cache.evict(1) == 0 and alloc.free_calls == 1


def test_all_slots_and_reset(cache: RadixCache, alloc: FakeAllocator) -> None:
    cache.insert([1, 2, 3], slots(10, 11, 12))
    cache.insert([1, 5], slots(10, 15))
    cache.match_prefix([1])
    assert sorted(cache.all_slots().tolist()) == [10, 11, 12, 15]
    free_before = set(alloc.free_set)
    cache.reset()
    assert alloc.free_set == free_before  # reset frees nothing
    assert cache.total_size() == 0 and cache.all_slots().numel() == 0
    assert cache.match_prefix([1, 2]).last_node is cache.root
    assert cache.stats() == {
        "hit_tokens": 0,
        "requested_tokens": 2,
        "hit_rate": 0.0,
        "evicted_tokens": 0,
        "num_nodes": 0,
        "cached_tokens": 0,
    }
    cache.check_invariants()


def test_hit_rate_metrics_count_only_when_asked(cache: RadixCache) -> None:
    cache.insert([1, 2, 3, 4], slots(10, 11, 12, 13))
    cache.match_prefix([1, 2, 3, 4], count=False)
    cache.match_prefix([1, 2, 7, 8])
    cache.match_prefix([1, 2, 3, 4, 5, 6])
    s = cache.stats()
    assert (s["hit_tokens"], s["requested_tokens"]) == (6, 10)
    assert s["hit_rate"] == pytest.approx(0.6)
    assert s["cached_tokens"] == 4 and s["num_nodes"] == 2


def test_check_invariants_detects_corruption(cache: RadixCache) -> None:
    cache.insert([1, 2, 3], slots(10, 11, 12))
    cache.check_invariants()
    cache._evictable += 1
    with pytest.raises(AssertionError):
        cache.check_invariants()
    cache._evictable -= 1
    cache.insert([4], slots(11))  # the same slot held twice
    with pytest.raises(AssertionError):
        cache.check_invariants()


def test_device_defaults_to_the_allocators() -> None:
    alloc = FakeAllocator()
    alloc.device = "cpu"
    assert RadixCache(alloc).device == torch.device("cpu")
    assert RadixCache(FakeAllocator(), device="meta").match_prefix([1]).slots.device == torch.device("meta")


def test_long_prompts_match_without_growing_the_tree(cache: RadixCache) -> None:
    prompt = list(range(2000))
    cache.insert(prompt, torch.arange(1, 2001))
    diverging = prompt[:1500] + [-1] * 500
    cache.match_prefix(diverging)  # splits the node once, at 1500
    size = cache.total_size()
    for _ in range(3):
        assert cache.match_prefix(prompt).slots.numel() == 2000
        assert cache.match_prefix(diverging).slots.numel() == 1500
    assert cache.total_size() == size == 2000
    cache.check_invariants()
