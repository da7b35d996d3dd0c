"""The chunked common-prefix comparison equals the token-by-token definition."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from radixlm.radix.key import as_key, common_prefix_len

long_seqs = st.lists(st.integers(0, 1), min_size=0, max_size=300)


def naive(node_key: tuple[int, ...], key: tuple[int, ...], start: int) -> int:
    n = 0
    while n < len(node_key) and start + n < len(key) and node_key[n] == key[start + n]:
        n += 1
    return n


@settings(max_examples=200, deadline=None)
@given(shared=long_seqs, a=long_seqs, b=long_seqs, lead=long_seqs)
def test_common_prefix_len_matches_naive(shared, a, b, lead) -> None:
    node_key = tuple(shared + a)
    key = tuple(lead + shared + b)
    assert common_prefix_len(node_key, key, len(lead)) == naive(node_key, key, len(lead))


def test_as_key_accepts_lists_and_tensors() -> None:
    assert as_key([3, 4]) == (3, 4)
    assert as_key(torch.tensor([3, 4])) == (3, 4) and type(as_key(torch.tensor([3]))[0]) is int
