"""The server view's radix tree snapshot: shape, holders, and the node cap."""

from __future__ import annotations

import pytest
import torch

from radixlm.radix import RadixCache
from radixlm.radix.snapshot import tree_snapshot
from tests.radix.radix_fakes import FakeAllocator


def _cache() -> RadixCache:
    cache = RadixCache(FakeAllocator())
    cache.insert([1, 2, 3, 4], torch.arange(10, 14))
    cache.insert([1, 2, 7], torch.tensor([10, 11, 17]))  # splits [1..4] after 2 tokens
    cache.insert([9], torch.tensor([19]))
    return cache


def test_snapshot_lists_every_node_with_parent_size_and_locks() -> None:
    cache = _cache()
    held = cache.match_prefix([1, 2, 3, 4]).last_node
    cache.inc_lock(held)
    snap = tree_snapshot(cache.root, 10, [("req-a", held)])
    nodes = snap["nodes"]
    assert not snap["truncated"] and len(nodes) == 5  # root, [1 2], [3 4], [7], [9]
    by_head = {tuple(n["head"]): n for n in nodes[1:]}
    assert by_head[(1, 2)]["tokens"] == 2 and by_head[(1, 2)]["parent"] == 0
    assert nodes[by_head[(3, 4)]["parent"]]["head"] == [1, 2]
    assert by_head[(3, 4)]["lock_ref"] == 1 and by_head[(3, 4)]["held_by"] == ["req-a"]
    assert by_head[(1, 2)]["held_by"] == ["req-a"] and by_head[(7,)]["held_by"] == []
    assert by_head[(9,)]["lock_ref"] == 0 and nodes[0]["held_by"] == []


def test_snapshot_stops_at_the_cap_shallow_nodes_first() -> None:
    snap = tree_snapshot(_cache().root, 2, [])
    assert snap["truncated"] and len(snap["nodes"]) == 3
    assert all(n["parent"] == 0 for n in snap["nodes"][1:])  # depth 1 before depth 2


def test_negative_cap_is_refused() -> None:
    with pytest.raises(ValueError, match="max_nodes"):
        tree_snapshot(_cache().root, -1)
