"""``continuation``: what the tree holds after a whole sequence, read without changing the tree."""

from __future__ import annotations

import torch

from radixlm.radix import RadixCache
from radixlm.radix.continuation import continuation
from radixlm.runtime.lora.namespace import namespaced, plain_ids
from tests.radix.radix_fakes import FakeAllocator, tree_content


def _insert(cache: RadixCache, ids: list[int]) -> None:
    cache.insert(ids, torch.arange(100, 100 + len(ids), dtype=torch.int64))


def test_continues_inside_a_node_then_through_its_children() -> None:
    cache = RadixCache(FakeAllocator())
    _insert(cache, [1, 2, 3, 4, 5, 6])
    _insert(cache, [1, 2, 3, 4, 5, 6, 7, 8])  # a child after 6
    before = tree_content(cache), cache.stats()["num_nodes"]
    assert continuation(cache.root, [1, 2], 3) == [3, 4, 5]
    assert continuation(cache.root, [1, 2], 10) == [3, 4, 5, 6, 7, 8]
    assert continuation(cache.root, [1, 2, 3, 4, 5, 6], 1) == [7]
    assert (tree_content(cache), cache.stats()["num_nodes"]) == before  # no split, nothing moved


def test_nothing_when_the_tree_does_not_hold_the_whole_sequence() -> None:
    cache = RadixCache(FakeAllocator())
    _insert(cache, [1, 2, 3, 4])
    assert continuation(cache.root, [1, 9], 3) == []  # diverges inside a node
    assert continuation(cache.root, [1, 2, 3, 4, 5], 3) == []  # runs past the tree
    assert continuation(cache.root, [7], 3) == []
    assert continuation(cache.root, [1, 2, 3, 4], 3) == []  # a leaf: nothing follows
    assert continuation(cache.root, [1], 0) == []


def test_the_most_recently_used_branch_wins() -> None:
    cache = RadixCache(FakeAllocator())
    _insert(cache, [1, 2, 3, 10, 11])
    _insert(cache, [1, 2, 3, 20, 21])
    assert continuation(cache.root, [1, 2, 3], 2) == [20, 21]
    cache.match_prefix([1, 2, 3, 10, 11])  # used again: now the newer branch
    assert continuation(cache.root, [1, 2, 3], 2) == [10, 11]


def test_namespaced_keys_come_back_as_tokens_up_to_a_non_token() -> None:
    cache = RadixCache(FakeAllocator())
    vocab = 50
    _insert(cache, namespaced([1, 2, 3, 4, vocab + 7, 5], 2))  # vocab + 7: an image's pad value
    keys = continuation(cache.root, namespaced([1, 2], 2), 4)
    assert plain_ids(keys, 2, vocab) == [3, 4]
    assert continuation(cache.root, [1, 2], 4) == []  # the base namespace holds nothing of it
